package validate

import (
	"maps"
	"strings"
	"testing"
)

func TestParseLabels(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     map[string]string
		wantErr  string
	}{
		{"empty", "", map[string]string{}, ""},
		{"zone and rack", "zone=a, rack=r1", map[string]string{"zone": "a", "rack": "r1"}, ""},
		{"dotted key", "topology.zone=eu-west-1a", map[string]string{"topology.zone": "eu-west-1a"}, ""},
		{"no equals", "zone", nil, `label "zone": want key=value`},
		{"twice", "zone=a,zone=b", nil, `label "zone" given twice`},
		{"empty value", "zone=", nil, "labels[zone]: label value"},
		{"upper-case key", "Zone=a", nil, "labels[Zone]: a label key is"},
		{"key starts with dash", "-zone=a", nil, "labels[-zone]"},
		{"space in value", "zone=a b", nil, "labels[zone]"},
		{"long key", strings.Repeat("k", 64) + "=a", nil, "a label key is 1..63"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseLabels(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseLabels(%q) = %v, %v, want error %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !maps.Equal(got, tc.want) {
				t.Fatalf("ParseLabels(%q) = %v, %v, want %v", tc.in, got, err, tc.want)
			}
		})
	}
	many := map[string]string{}
	for i := range MaxLabels + 1 {
		many[string(rune('a'+i))] = "x"
	}
	if bad := Labels("labels", many); len(bad) != 1 || bad[0].Field != "labels" {
		t.Fatalf("Labels(17 labels) = %v, want one violation on labels", bad)
	}
}
