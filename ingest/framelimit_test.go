package ingest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/kvrouter/kvrouter/ingest/vllmwire"
)

// zmtpFrame is one ZMTP 3 frame on the wire: flags, short or long size, body.
func zmtpFrame(flags byte, body []byte) []byte {
	if len(body) > 255 {
		return append(binary.BigEndian.AppendUint64([]byte{flags | 0x02}, uint64(len(body))), body...)
	}
	return append([]byte{flags, byte(len(body))}, body...)
}

// zmtpHandshake is what a NULL-security ZMTP 3.0 PUB peer sends first: its greeting and READY.
func zmtpHandshake() []byte {
	g := make([]byte, 64)
	g[0], g[9], g[10], g[11] = 0xFF, 0x7F, 3, 0
	copy(g[12:], "NULL")
	ready := append([]byte{5}, "READY"...)
	ready = append(ready, byte(len("Socket-Type")))
	ready = append(ready, "Socket-Type"...)
	ready = binary.BigEndian.AppendUint32(ready, 3)
	ready = append(ready, "PUB"...)
	return append(g, zmtpFrame(0x04, ready)...)
}

// hostilePeer is a raw TCP server speaking just enough ZMTP to be a PUB: on its i-th connection it
// sends the handshake, then a message whose payload frame header declares sizes[i] bytes (and no body).
type hostilePeer struct {
	l     net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func startHostilePeer(t *testing.T, sizes []uint64) *hostilePeer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &hostilePeer{l: l}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for i := 0; ; i++ {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.conns = append(p.conns, c)
			p.mu.Unlock()
			size := sizes[min(i, len(sizes)-1)]
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				msg := zmtpHandshake()
				msg = append(msg, zmtpFrame(0x01, nil)...)                                   // topic "", MORE
				msg = append(msg, zmtpFrame(0x01, binary.BigEndian.AppendUint64(nil, 7))...) // seq, MORE
				msg = binary.BigEndian.AppendUint64(append(msg, 0x02), size)                 // payload: long, no body
				if _, err := c.Write(msg); err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, c) // the subscriber's greeting, READY and SUBSCRIBE
			}()
		}
	}()
	t.Cleanup(p.close)
	return p
}

func (p *hostilePeer) addr() string { return "tcp://" + p.l.Addr().String() }

func (p *hostilePeer) close() {
	p.l.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestHostilePeerHugeFrame: an engine endpoint declaring frames of 2^62 bytes, 1 GiB and one byte over
// the limit does not make the ingest allocate them (zmq4 alone would crash on the first and allocate
// the second); each is counted oversized and malformed, and another engine's stream, under the same
// manager, keeps applying.
func TestHostilePeerHugeFrame(t *testing.T) {
	const limit = 1 << 20
	sizes := []uint64{1 << 62, 1 << 30, limit - 10} // the last + its 3 frames' headers is over the limit
	hostile := startHostilePeer(t, sizes)
	good := startPublisher(t, "", "tcp://127.0.0.1:0", 0)

	sink := &recordingSink{}
	m := NewManager(sink)
	bad := testConfig(nil)
	bad.WorkerID, bad.Endpoint, bad.MaxMessageBytes = "hostile", hostile.addr(), limit
	fine := testConfig(good)
	fine.MaxMessageBytes = limit
	for _, c := range []SubscriberConfig{bad, fine} {
		if err := m.Add(c); err != nil {
			t.Fatal(err)
		}
	}
	before := heapInUse()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	defer func() { cancel(); <-done }()

	good.waitSubscribed()
	good.publish(0, 1)
	stats := func(worker string) Stats {
		for _, st := range m.Stats() {
			if st.Key.WorkerID == worker {
				return st
			}
		}
		t.Fatalf("no stream for %s", worker)
		return Stats{}
	}
	eventually(t, waitLong, "three oversized frames refused", func() bool { return stats("hostile").Oversized >= 3 })
	good.publish(2, 3)
	eventually(t, waitLong, "the good engine's 4 events", func() bool { return sink.count() == 4 })

	grown := int64(heapInUse()) - int64(before)
	if grown > 32<<20 {
		t.Fatalf("heap in use grew by %d bytes", grown)
	}
	st := stats("hostile")
	if st.Malformed < st.Oversized || st.HasSeq || st.Messages != 0 {
		t.Fatalf("hostile stream stats %+v", st)
	}
	if got := markers(sink.snapshot()); !slices.Equal(got, []uint64{0, 1, 2, 3}) {
		t.Fatalf("good engine markers %v", got)
	}
	if gs := stats("w0"); gs.Malformed != 0 || gs.Oversized != 0 || gs.LostMessages != 0 {
		t.Fatalf("good stream stats %+v", gs)
	}
}

// TestFrameLimitAtTheBound: messages of exactly MaxMessageBytes wire bytes pass (through a real zmq4
// publisher and its replay socket), one byte more ends the connection — and the subscriber recovers
// the later messages.
func TestFrameLimitAtTheBound(t *testing.T) {
	pub := startPublisher(t, "", "tcp://127.0.0.1:0", 0)
	cfg := testConfig(pub)
	sink := &recordingSink{}
	small := payload(t, 0)
	// Live message wire size: topic frame (2) + seq frame (2+8) + payload frame (9+len) for len > 255.
	padded := func(marker uint64, n int) []byte {
		b := vllmwire.Batch{TS: 1, Events: []vllmwire.Event{{Kind: vllmwire.KindStored, BlockHashes: []uint64{marker},
			TokenIDs: []uint32{uint32(marker), 1, 2, 3}, BlockSize: 4, Medium: string(bytes.Repeat([]byte("G"), n))}}}
		p, err := vllmwire.Encode(b, vllmwire.EncodeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	atLimit := padded(1, 5000)
	cfg.MaxMessageBytes = 2 + 10 + 9 + len(atLimit)
	if len(padded(2, 5001)) != len(atLimit)+1 {
		t.Fatal("padding is not byte-exact")
	}
	sub, _ := runSubscriber(t, cfg, sink)
	pub.waitSubscribed()
	for _, p := range [][]byte{small, atLimit} {
		if _, err := pub.Publish(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, waitLong, "2 events", func() bool { return sink.count() == 2 })
	if _, err := pub.Publish(context.Background(), padded(2, 5001)); err != nil {
		t.Fatal(err)
	}
	eventually(t, waitLong, "oversized counted", func() bool { return sub.Stats().Oversized >= 1 })
	// After the reconnect the next live message shows the gap; the replay of seq 2 is refused too
	// (the same bound applies to the replay socket), so it alone is lost: the replay resumes after it.
	next := pub.publishUntilReceived(sink, 2, 3)
	eventually(t, waitLong, "later events", func() bool { return sink.count() == int(next)-1 })
	got := markers(sink.snapshot())
	if want := append([]uint64{0, 1}, seqRange(3, next)...); !slices.Equal(got, want) {
		t.Fatalf("markers %v, want %v", got, want)
	}
	if st := sub.Stats(); st.LostMessages != 1 || st.Malformed < 2 {
		t.Fatalf("stats %+v", st)
	}
}

// TestFrameLimitScanSplitReads: the framing state survives reads split at every byte.
func TestFrameLimitScanSplitReads(t *testing.T) {
	wire := zmtpHandshake()
	for i := 0; i < 3; i++ {
		wire = append(wire, zmtpFrame(0x01, []byte("topic"))...)
		wire = append(wire, zmtpFrame(0x00, bytes.Repeat([]byte{byte(i)}, 300))...)
	}
	over := binary.BigEndian.AppendUint64([]byte{0x02}, 1<<62)
	for _, chunk := range []int{1, 2, 7, 64, len(wire)} {
		c := &frameLimitConn{lim: frameLimit{maxMessage: 400}, greeting: zmtpGreetingLen}
		stream := append(slices.Clone(wire), over...)
		passed := 0
		var err error
		for off := 0; off < len(stream) && err == nil; off += chunk {
			var n int
			n, err = c.scan(stream[off:min(off+chunk, len(stream))])
			passed += n
		}
		var fl *frameLimitError
		if !errors.As(err, &fl) || fl.Declared != 1<<62 {
			t.Fatalf("chunk %d: err %v", chunk, err)
		}
		if want := len(stream) - 1; passed != want {
			t.Fatalf("chunk %d: %d bytes passed, want %d", chunk, passed, want)
		}
	}
}

// TestDefaultMessageLimitAboveRealBatches measures real large batches — one BlockStored of 512 blocks ×
// 16 tokens, and of 8192 blocks (a 128k-token prompt), with int and byte-string hashes — and checks
// the default bound leaves a wide margin (×16) above the larger.
func TestDefaultMessageLimitAboveRealBatches(t *testing.T) {
	for _, blocks := range []int{512, 8192} {
		ev := vllmwire.Event{Kind: vllmwire.KindStored, BlockSize: 16, Medium: "GPU", HasParent: true, Parent: 1 << 63}
		for i := 0; i < blocks; i++ {
			ev.BlockHashes = append(ev.BlockHashes, uint64(i)<<40|0xdeadbeefcafe)
			for j := 0; j < 16; j++ {
				ev.TokenIDs = append(ev.TokenIDs, uint32(100000+i*16+j)) // 5-byte msgpack ints, as real vocabularies
			}
		}
		for _, h := range []vllmwire.HashEncoding{vllmwire.HashInt, vllmwire.HashBytes} {
			p, err := vllmwire.Encode(vllmwire.Batch{TS: 1, Events: []vllmwire.Event{ev}}, vllmwire.EncodeOptions{Hashes: h})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d blocks, hash encoding %d: %d bytes", blocks, h, len(p))
			if 16*len(p) > DefaultMaxMessageBytes {
				t.Fatalf("%d-byte batch leaves less than ×16 under the default bound", len(p))
			}
		}
	}
}

// FuzzFrameLimitScan: for any byte stream and any way of splitting it into reads, the scanner stops at
// the same byte with the same verdict as one scan of the whole stream (the framing state survives read
// boundaries), and never reports more bytes passed than it was given.
func FuzzFrameLimitScan(f *testing.F) {
	wire := zmtpHandshake()
	wire = append(wire, zmtpFrame(0x01, []byte("topic"))...)
	wire = append(wire, zmtpFrame(0x00, bytes.Repeat([]byte{7}, 300))...)
	f.Add(wire, uint16(1000), uint8(3))
	f.Add(append(slices.Clone(wire), binary.BigEndian.AppendUint64([]byte{0x02}, 1<<62)...), uint16(1000), uint8(1))
	f.Add(append(slices.Clone(wire), bytes.Repeat([]byte{0x01, 0x00}, 20)...), uint16(4096), uint8(64))
	f.Fuzz(func(t *testing.T, stream []byte, limit uint16, chunk uint8) {
		whole := &frameLimitConn{lim: frameLimit{maxMessage: uint64(limit)}, greeting: zmtpGreetingLen}
		wantN, wantErr := whole.scan(stream)
		c := &frameLimitConn{lim: frameLimit{maxMessage: uint64(limit)}, greeting: zmtpGreetingLen}
		step := max(int(chunk), 1)
		passed := 0
		var err error
		for off := 0; off < len(stream) && err == nil; off += step {
			part := stream[off:min(off+step, len(stream))]
			var n int
			n, err = c.scan(part)
			if n > len(part) {
				t.Fatalf("scan passed %d of %d bytes", n, len(part))
			}
			passed += n
		}
		if passed != wantN || (err == nil) != (wantErr == nil) {
			t.Fatalf("chunks of %d: passed %d err %v; whole stream: %d %v", step, passed, err, wantN, wantErr)
		}
	})
}

// TestFrameLimitIPC: ipc:// endpoints go through the limited transport too, and still work.
func TestFrameLimitIPC(t *testing.T) {
	dir := t.TempDir()
	pub := startPublisher(t, "ipc://"+dir+"/pub", "ipc://"+dir+"/replay", 0)
	cfg := testConfig(nil)
	cfg.Endpoint, cfg.ReplayEndpoint = "ipc://"+dir+"/pub", "ipc://"+dir+"/replay"
	if got := limitedEndpoint(cfg.Endpoint); got != "kvrouter-ipc://"+dir+"/pub" {
		t.Fatalf("limitedEndpoint = %q", got)
	}
	sink := &recordingSink{}
	sub, _ := runSubscriber(t, cfg, sink)
	pub.waitSubscribed()
	pub.lose(0) // replayed: the replay socket works over ipc as well
	pub.publish(1)
	eventually(t, waitLong, "2 events", func() bool { return sink.count() == 2 })
	if st := sub.Stats(); st.ReplayedMessages != 1 || st.Malformed != 0 {
		t.Fatalf("stats %+v", st)
	}
}
