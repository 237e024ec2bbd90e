package dispatch

import (
	"testing"

	"github.com/sundialmq/sundial/broker/internal/keys"
)

func TestFloors(t *testing.T) {
	q := keys.Queue{Topic: "t", Group: "g"}
	other := keys.Queue{Topic: "u", Group: "g"}
	at := func(ms int64, key string) floor { return floor{ms: ms, key: []byte(key)} }
	tests := []struct {
		name  string
		steps func(f *floors)
		want  floor
		ok    bool
	}{
		{"no scan yet", func(*floors) {}, floor{}, false},
		{"a scan leaves its first entry", func(f *floors) {
			f.begin(q)
			f.end(q, at(100, "k100"), true)
		}, at(100, "k100"), true},
		{"a failed scan leaves no floor", func(f *floors) {
			f.begin(q)
			f.end(q, at(100, "k100"), true)
			f.begin(q)
			f.end(q, at(200, "k200"), false)
		}, floor{}, false},
		{"an insertion below the floor lowers it to its instant", func(f *floors) {
			f.begin(q)
			f.end(q, at(100, "k100"), true)
			f.lower(map[keys.Queue]int64{q: 40}, false)
		}, floor{ms: 40}, true},
		{"an insertion at the floor's instant drops its key", func(f *floors) {
			f.begin(q)
			f.end(q, at(100, "k100"), true)
			f.lower(map[keys.Queue]int64{q: 100}, false)
		}, floor{ms: 100}, true},
		{"an insertion above the floor keeps it", func(f *floors) {
			f.begin(q)
			f.end(q, at(100, "k100"), true)
			f.lower(map[keys.Queue]int64{q: 500}, false)
		}, at(100, "k100"), true},
		{"an insertion during the scan holds the floor below it", func(f *floors) {
			f.begin(q)
			f.lower(map[keys.Queue]int64{q: 30}, false)
			f.end(q, at(100, "k100"), true)
		}, floor{ms: 30}, true},
		{"an insertion into another queue during the scan", func(f *floors) {
			f.begin(q)
			f.lower(map[keys.Queue]int64{other: 30}, false)
			f.end(q, at(100, "k100"), true)
		}, at(100, "k100"), true},
		{"a reset drops the floors", func(f *floors) {
			f.begin(q)
			f.end(q, at(100, "k100"), true)
			f.lower(nil, true)
		}, floor{}, false},
		{"a reset during the scan leaves no floor", func(f *floors) {
			f.begin(q)
			f.lower(nil, true)
			f.end(q, at(100, "k100"), true)
		}, floor{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFloors()
			tt.steps(f)
			got, ok := f.begin(q)
			if ok != tt.ok || got.ms != tt.want.ms || string(got.key) != string(tt.want.key) {
				t.Fatalf("begin(q) = {%d %q} %v, want {%d %q} %v", got.ms, got.key, ok, tt.want.ms, tt.want.key, tt.ok)
			}
		})
	}
}
