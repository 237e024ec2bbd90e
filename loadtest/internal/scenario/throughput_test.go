package scenario

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/sundialmq/sundial/proto/client"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

type okProducer struct {
	sundialv1.UnimplementedProducerServer
}

func (okProducer) Publish(_ context.Context, req *sundialv1.PublishRequest) (*sundialv1.PublishResponse, error) {
	resp := &sundialv1.PublishResponse{RequestId: req.GetRequestId()}
	for range req.GetMessages() {
		resp.Results = append(resp.Results, &sundialv1.PublishResult{MessageId: "x"})
	}
	return resp, nil
}

func TestThroughputAgainstFakeProducer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	sundialv1.RegisterProducerServer(s, okProducer{})
	go func() { _ = s.Serve(lis) }()
	defer s.Stop()
	c, err := client.Dial(context.Background(), []string{lis.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := ThroughputConfig{Duration: 200 * time.Millisecond, Concurrency: 2, Batch: 10, SizeBytes: 16, DelayMin: time.Second, DelayMax: time.Minute}
	res, err := Throughput(ctx, c, cfg)
	if err != nil {
		t.Fatalf("Throughput(%+v) = %v, want nil", cfg, err)
	}
	if res.Published == 0 || res.Failed != 0 || res.Published%10 != 0 {
		t.Errorf("Throughput(%+v) published %d, failed %d; want a positive multiple of 10 and 0", cfg, res.Published, res.Failed)
	}
	if res.Latency.Count != res.Published || res.Latency.P50 <= 0 {
		t.Errorf("Throughput latency = %+v, want %d samples with positive p50", res.Latency, res.Published)
	}
}

func TestThroughputConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     ThroughputConfig
		wantErr bool
	}{
		{"ok", ThroughputConfig{DelayMin: time.Second, DelayMax: time.Hour}, false},
		{"max below min", ThroughputConfig{DelayMin: time.Hour, DelayMax: time.Second}, true},
		{"negative", ThroughputConfig{DelayMin: -time.Second}, true},
		{"too big", ThroughputConfig{SizeBytes: 2 << 20}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); (err != nil) != tc.wantErr {
				t.Errorf("Validate(%+v) = %v, want error %v", tc.cfg, err, tc.wantErr)
			}
		})
	}
}
