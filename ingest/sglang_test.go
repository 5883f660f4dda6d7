package ingest

import (
	"context"
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/ingest/zmqpub"
)

// TestSubscriberSGLangEpochTopic: a snapshot-enabled SGLang publisher appends "\x00sgl-kv-epoch=<id>"
// to its topic frame; the subscription is a prefix, so a subscriber configured with the plain topic
// still receives and applies its messages (live and replayed).
func TestSubscriberSGLangEpochTopic(t *testing.T) {
	p, err := zmqpub.New(zmqpub.Options{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0",
		Topic: "kv\x00sgl-kv-epoch=5f0c1d2e", Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	pub := &testPublisher{Publisher: p, t: t}
	t.Cleanup(func() { p.Close() })
	cfg := testConfig(pub)
	cfg.Topic = "kv"
	sink := &recordingSink{}
	runSubscriber(t, cfg, sink)
	pub.waitSubscribed()
	pub.lose(0)
	pub.publish(1, 2)
	eventually(t, waitLong, "3 events", func() bool { return sink.count() == 3 })
	if got := markers(sink.snapshot()); !slices.Equal(got, []uint64{0, 1, 2}) {
		t.Fatalf("markers %v", got)
	}
}
