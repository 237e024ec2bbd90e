package integration

import (
	"context"
	"testing"
	"time"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// A WatchRouting request with progress_interval_ms gets, on a quiet
// cluster, progress frames after the table: each names the interval kept
// (clamped to at least 100 ms) and the version of the table sent, and
// carries nothing else. A request without it gets tables only, none
// naming an interval, so a watcher never takes it for a silent broker's.
func TestWatchRoutingProgressFrames(t *testing.T) {
	c := New(t, Config{Shards: 1})
	cl := clusterClient(t, c.Nodes[0].Config.GRPCAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	stream, err := cl.WatchRouting(ctx, &sundialv1.WatchRoutingRequest{ProgressIntervalMs: 1})
	if err != nil {
		t.Fatalf("WatchRouting(progress 1 ms) error = %v", err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatalf("Recv() first frame: %v", err)
	}
	if first.GetProgressOnly() || len(first.GetShards()) == 0 {
		t.Fatalf("first frame = progress_only %v, %d shards; want the table", first.GetProgressOnly(), len(first.GetShards()))
	}
	if got := first.GetProgressIntervalMs(); got != 100 {
		t.Fatalf("first frame progress_interval_ms = %d, want 100 (1 ms clamped)", got)
	}
	// Frames until three progress frames came: tables may come in between
	// (a leader change), progress frames repeat the last table's version.
	version := first.GetVersion()
	for progress := 0; progress < 3; {
		f, err := stream.Recv()
		if err != nil {
			t.Fatalf("Recv() after %d progress frames: %v", progress, err)
		}
		if got := f.GetProgressIntervalMs(); got != 100 {
			t.Fatalf("frame progress_interval_ms = %d, want 100", got)
		}
		if !f.GetProgressOnly() {
			version = f.GetVersion()
			continue
		}
		progress++
		if f.GetVersion() != version || len(f.GetNodes())+len(f.GetShards())+len(f.GetTopics())+len(f.GetHandovers()) > 0 {
			t.Fatalf("progress frame = version %d, %d nodes, %d shards, %d topics, %d hand-overs; want version %d and nothing else",
				f.GetVersion(), len(f.GetNodes()), len(f.GetShards()), len(f.GetTopics()), len(f.GetHandovers()), version)
		}
	}

	plain, err := cl.WatchRouting(ctx, &sundialv1.WatchRoutingRequest{})
	if err != nil {
		t.Fatalf("WatchRouting() error = %v", err)
	}
	f, err := plain.Recv()
	if err != nil {
		t.Fatalf("Recv() without progress: %v", err)
	}
	if f.GetProgressOnly() || f.GetProgressIntervalMs() != 0 {
		t.Fatalf("frame without progress asked = progress_only %v, progress_interval_ms %d; want a table naming no interval",
			f.GetProgressOnly(), f.GetProgressIntervalMs())
	}
}
