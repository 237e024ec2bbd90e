package validate

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sundialmq/sundial/proto/apierr"
)

// MaxLabels bounds the location labels of one node.
const MaxLabels = 16

// maxLabelLen bounds a label key and a label value, as a DNS label.
const maxLabelLen = 63

// Labels checks a node's location labels (zone=a, rack=r1): at most
// MaxLabels; keys of lower-case letters, digits, '-', '_' and '.' that start
// and end with a letter or digit; values of letters, digits, '-', '_' and
// '.'; both 1..63 characters. field names the map in the violations
// ("labels" gives "labels[zone]").
func Labels(field string, labels map[string]string) []apierr.FieldViolation {
	var out []apierr.FieldViolation
	if len(labels) > MaxLabels {
		out = append(out, violation(field, fmt.Sprintf("at most %d labels, got %d", MaxLabels, len(labels)))...)
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		f := fmt.Sprintf("%s[%s]", field, k)
		if !labelKey(k) {
			out = append(out, violation(f, "a label key is 1..63 lower-case letters, digits, '-', '_' or '.', starting and ending with a letter or digit")...)
		}
		if !labelValue(labels[k]) {
			out = append(out, violation(f, fmt.Sprintf("label value %q: 1..63 letters, digits, '-', '_' or '.'", labels[k]))...)
		}
	}
	return out
}

// ParseLabels parses "zone=a,rack=r1" into labels and checks them with
// Labels; "" is no labels. Its error names the offending pair.
func ParseLabels(s string) (map[string]string, error) {
	labels := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return labels, nil
	}
	for _, pair := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok {
			return nil, fmt.Errorf("label %q: want key=value, such as zone=a", pair)
		}
		if _, dup := labels[k]; dup {
			return nil, fmt.Errorf("label %q given twice", k)
		}
		labels[k] = v
	}
	if bad := Labels("labels", labels); len(bad) > 0 {
		return nil, fmt.Errorf("%s: %s", bad[0].Field, bad[0].Description)
	}
	return labels, nil
}

func labelKey(k string) bool {
	if k == "" || len(k) > maxLabelLen || !alnum(k[0]) || !alnum(k[len(k)-1]) {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		lower := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !lower && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

func labelValue(v string) bool {
	if v == "" || len(v) > maxLabelLen {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; !alnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
