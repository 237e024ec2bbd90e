package proxy

import (
	"syscall"
	"testing"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// BenchmarkPublishOneMessage is the precision scenario's request through
// the proxy: one message, so one shard part, forwarded to a fake broker
// over loopback gRPC. cpu-us/op is the whole process's CPU (client, proxy
// and fake broker) per request, from getrusage.
func BenchmarkPublishOneMessage(b *testing.B) {
	_, _, conn := startCluster(b)
	client := sundialv1.NewProducerClient(conn)
	req := &sundialv1.PublishRequest{RequestId: "r", Messages: []*sundialv1.Message{{Topic: "wide", Payload: []byte("payload")}}}
	if _, err := client.Publish(b.Context(), req); err != nil {
		b.Fatalf("Publish() = %v", err)
	}
	b.ReportAllocs()
	before := processCPU(b)
	b.ResetTimer()
	for b.Loop() {
		if _, err := client.Publish(b.Context(), req); err != nil {
			b.Fatalf("Publish() = %v", err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(processCPU(b)-before)/1e3/float64(b.N), "cpu-us/op")
}

// processCPU is this process's user + system CPU time in nanoseconds.
func processCPU(tb testing.TB) int64 {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
