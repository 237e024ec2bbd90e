package command

import "testing"

// TestOperationProgress pins the STEP column that drain-node and
// rebalance/operations both print through operationView.progress.
func TestOperationProgress(t *testing.T) {
	cases := []struct {
		name string
		op   operationView
		want string
	}{
		{"running", operationView{Status: "running", Step: "2/3 add"}, "2/3 add"},
		{"done", operationView{Status: "done", Step: "3/3 remove", Duration: "2.5s"}, "took 2.5s"},
		{"failed", operationView{Status: "failed", Error: "replica lags", Duration: "1s"}, "replica lags"},
		{"planned", operationView{Status: "planned"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.op.progress(); got != tc.want {
				t.Errorf("progress(%+v) = %q, want %q", tc.op, got, tc.want)
			}
		})
	}
}
