package tlsfiles

import (
	"reflect"
	"strings"
	"testing"
)

func TestLoopback(t *testing.T) {
	tests := []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:7400", true},
		{"127.3.4.5:0", true},
		{"localhost:7400", true},
		{"[::1]:7400", true},
		{"0.0.0.0:7400", false},
		{":7400", false},
		{"[::]:7400", false},
		{"10.0.0.4:7400", false},
		{"broker-1:7500", false},
		{"no-port", false},
	}
	for _, tt := range tests {
		if got := Loopback(tt.addr); got != tt.want {
			t.Errorf("Loopback(%q) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}

func TestExposed(t *testing.T) {
	got := Exposed(Listener{"grpc_addr", "127.0.0.1:1"}, Listener{"http_addr", ""}, Listener{"raft_addr", "0.0.0.0:2"})
	if want := []Listener{{"raft_addr", "0.0.0.0:2"}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Exposed() = %v, want %v", got, want)
	}
}

func TestRequireLoopback(t *testing.T) {
	open := []Listener{{"grpc_addr", "0.0.0.0:7400"}, {"http_addr", "127.0.0.1:7480"}}
	err := RequireLoopback(false, open...)
	if err == nil || !strings.Contains(err.Error(), "grpc_addr: 0.0.0.0:7400") || !strings.Contains(err.Error(), "--insecure") || strings.Contains(err.Error(), "http_addr") {
		t.Errorf("RequireLoopback(false, %v) = %v, want an error naming grpc_addr and --insecure only", open, err)
	}
	if err := RequireLoopback(true, open...); err != nil {
		t.Errorf("RequireLoopback(true, %v) = %v, want nil", open, err)
	}
}
