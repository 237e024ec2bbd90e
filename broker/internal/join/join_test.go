package join

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		spec string
		ok   bool
	}{
		{"127.0.0.1:7501", true},
		{"broker-0.sundial:7500", true},
		{"[::1]:7501", true},
		{"dns+srv://_sundial-grpc._tcp.sundial.default.svc", true},
		{"127.0.0.1", false},
		{":7501", false},
		{"127.0.0.1:0", false},
		{"127.0.0.1:70000", false},
		{"dns+srv://", false},
		{"dns+srv://name:7500", false},
		{"http://127.0.0.1:7501", false},
	} {
		err := Parse(tc.spec)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrBadAddress)) {
			t.Errorf("Parse(%q) = %v, want ok=%v", tc.spec, err, tc.ok)
		}
	}
}

type fakeSRV map[string][]*net.SRV

func (f fakeSRV) LookupSRV(_ context.Context, service, proto, name string) (string, []*net.SRV, error) {
	if service != "" || proto != "" {
		return "", nil, errors.New("want the name looked up as given")
	}
	recs, ok := f[name]
	if !ok {
		return "", nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
	}
	return name, recs, nil
}

func TestResolve(t *testing.T) {
	r := fakeSRV{
		"_sundial-grpc._tcp.sundial.default.svc": {
			{Target: "sundial-0.sundial.default.svc.", Port: 7500},
			{Target: "sundial-1.sundial.default.svc.", Port: 7500},
		},
		"_empty._tcp.example": {},
	}
	for _, tc := range []struct {
		name  string
		specs []string
		want  []string // nil: an error
	}{
		{"addresses as given", []string{"127.0.0.1:7501", "127.0.0.1:7502"}, []string{"127.0.0.1:7501", "127.0.0.1:7502"}},
		{"srv targets without the final dot", []string{"dns+srv://_sundial-grpc._tcp.sundial.default.svc", "sundial-0.sundial.default.svc:7500"},
			[]string{"sundial-0.sundial.default.svc:7500", "sundial-1.sundial.default.svc:7500"}},
		{"unknown name", []string{"dns+srv://_nothing._tcp.example"}, nil},
		{"name without records", []string{"dns+srv://_empty._tcp.example"}, nil},
		{"bad address", []string{"127.0.0.1:7501", "nohostport"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(context.Background(), tc.specs, r)
			if tc.want == nil {
				if err == nil {
					t.Fatalf("Resolve(%q) = %q, want an error", tc.specs, got)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("Resolve(%q) = %q, %v, want %q", tc.specs, got, err, tc.want)
			}
		})
	}
}
