package zmqpub

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestRing(t *testing.T) {
	r := newRing(3)
	for i := range uint64(5) {
		r.push(i, []byte{byte(i)})
	}
	seqs, payloads := r.from(0)
	if len(seqs) != 3 || seqs[0] != 2 || seqs[2] != 4 || payloads[0][0] != 2 {
		t.Fatalf("ring %v %v", seqs, payloads)
	}
	if seqs, _ := r.from(4); len(seqs) != 1 || seqs[0] != 4 {
		t.Fatalf("from(4) %v", seqs)
	}
	if seqs, _ := newRing(0).from(0); seqs != nil {
		t.Fatal("zero-capacity ring kept something")
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options{{}, {Endpoint: "udp://x"}, {Endpoint: "tcp://x:1", ReplayEndpoint: "x"}, {Endpoint: "tcp://x:1", BufferSteps: -1}} {
		if _, err := New(o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// TestReplayProtocol speaks vLLM's replay protocol with raw sockets: a REQ client (as vLLM's own
// example subscriber) and a DEALER (as kvrouter's ingest), each sending start_seq and reading
// [seq, payload] frames until seq -1 with an empty payload.
func TestReplayProtocol(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := New(Options{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", BufferSteps: 3, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 5 {
		publish := p.Publish
		if i == 3 {
			publish = p.PublishLost // replayable all the same
		}
		if seq, err := publish(ctx, []byte{'m', byte(i)}); err != nil || seq != uint64(i) {
			t.Fatalf("publish %d: seq %d, %v", i, seq, err)
		}
	}
	for _, client := range []zmq4.Socket{zmq4.NewReq(ctx), zmq4.NewDealer(ctx)} {
		if err := client.Dial(p.ReplayAddr()); err != nil {
			t.Fatal(err)
		}
		req := zmq4.NewMsgFrom(binary.BigEndian.AppendUint64(nil, 3))
		if client.Type() == zmq4.Dealer {
			req = zmq4.NewMsgFrom(nil, binary.BigEndian.AppendUint64(nil, 3)) // explicit delimiter
		}
		if err := client.Send(req); err != nil {
			t.Fatal(err)
		}
		var got []uint64
		for {
			msg, err := client.Recv()
			if err != nil {
				t.Fatal(err)
			}
			f := msg.Frames
			if client.Type() == zmq4.Dealer {
				if len(f[0]) != 0 {
					t.Fatalf("DEALER answer without the empty delimiter: %q", f)
				}
				f = f[1:]
			}
			if len(f) != 2 || len(f[0]) != 8 {
				t.Fatalf("%s: answer frames %q", client.Type(), msg.Frames)
			}
			seq := binary.BigEndian.Uint64(f[0])
			if seq == EndSeq {
				if len(f[1]) != 0 {
					t.Fatal("end marker with a payload")
				}
				break
			}
			if !bytes.Equal(f[1], []byte{'m', byte(seq)}) {
				t.Fatalf("seq %d payload %q", seq, f[1])
			}
			got = append(got, seq)
			if client.Type() == zmq4.Req {
				break // a REQ socket takes one reply per request
			}
		}
		client.Close()
		want := []uint64{3, 4}
		if client.Type() == zmq4.Req {
			want = want[:1]
		}
		if len(got) != len(want) || got[0] != want[0] {
			t.Fatalf("%s: replayed %v, want %v", client.Type(), got, want)
		}
	}
}
