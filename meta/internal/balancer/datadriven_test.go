package balancer

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sundialmq/sundial/meta"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of testdata/*.txt with what the planner gives")

// TestPlanScripts runs the scripts in testdata. A script is a sequence of
// cases separated by blank lines; '#' lines are comments. A case is a
// command line, the cluster it runs on, "----" and the expected output:
//
//	plan [max=N]                  one plan: its operations, then counts after it
//	converge [max=N]              plan and apply until nothing is planned
//	node ID [active|draining|dead] [zone=Z] [disk=BYTES]
//	shard ID rf=N on=A,B,C [leader=A]
//	inprogress move|add|remove|transfer shard=ID [from=A] [to=B] [leader=C] [status=S]
//
// Run with -rewrite to record the output the planner gives.
func TestPlanScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts in testdata: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) { runScript(t, file) })
	}
}

type scriptCase struct {
	pre    []string // comments and blank lines before the command
	cmd    string
	input  []string
	output []string
	line   int // of the command, for messages
}

func runScript(t *testing.T, file string) {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cases, trailer := parseScript(t, file, string(b))
	var out strings.Builder
	for _, sc := range cases {
		got := runCase(t, file, sc)
		if !*rewrite && !slices.Equal(got, sc.output) {
			t.Errorf("%s:%d: %s\ngot:\n%s\nwant:\n%s", file, sc.line, sc.cmd,
				strings.Join(got, "\n"), strings.Join(sc.output, "\n"))
		}
		for _, l := range sc.pre {
			out.WriteString(l + "\n")
		}
		out.WriteString(sc.cmd + "\n")
		for _, l := range sc.input {
			out.WriteString(l + "\n")
		}
		out.WriteString("----\n")
		for _, l := range got {
			out.WriteString(l + "\n")
		}
	}
	for _, l := range trailer {
		out.WriteString(l + "\n")
	}
	if *rewrite {
		if err := os.WriteFile(file, []byte(strings.TrimRight(out.String(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func parseScript(t *testing.T, file, text string) ([]scriptCase, []string) {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	var cases []scriptCase
	i := 0
	for i < len(lines) {
		var sc scriptCase
		for i < len(lines) && (strings.TrimSpace(lines[i]) == "" || strings.HasPrefix(lines[i], "#")) {
			sc.pre = append(sc.pre, lines[i])
			i++
		}
		if i == len(lines) {
			return cases, sc.pre
		}
		sc.cmd, sc.line = lines[i], i+1
		i++
		for i < len(lines) && lines[i] != "----" {
			sc.input = append(sc.input, lines[i])
			i++
		}
		if i == len(lines) {
			t.Fatalf("%s:%d: case without ----", file, sc.line)
		}
		i++
		for i < len(lines) && strings.TrimSpace(lines[i]) != "" {
			sc.output = append(sc.output, lines[i])
			i++
		}
		cases = append(cases, sc)
	}
	return cases, nil
}

func runCase(t *testing.T, file string, sc scriptCase) []string {
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%s:%d: %s", file, sc.line, fmt.Sprintf(format, args...))
	}
	cmd, args := splitArgs(sc.cmd)
	cfg := DefaultConfig()
	if m, ok := args["max"]; ok {
		cfg.MaxOperations = atoi(m)
	}
	v, err := parseView(sc.input)
	if err != nil {
		fail("%v", err)
	}
	switch cmd {
	case "plan":
		ops := Plan(v, cfg)
		var out []string
		for _, op := range ops {
			out = append(out, op.String())
		}
		if len(ops) == 0 {
			out = append(out, "no operations")
		}
		for _, op := range ops {
			if err := applyOperation(&v, op); err != nil {
				fail("%v", err)
			}
		}
		return append(out, countsLine(v))
	case "converge":
		rounds, stats, err := converge(&v, cfg, 1000)
		if err != nil {
			fail("%v", err)
		}
		return []string{
			fmt.Sprintf("rounds=%d moves=%d adds=%d removes=%d transfers=%d", rounds,
				stats[meta.OpKindMoveReplica], stats[meta.OpKindAddReplica],
				stats[meta.OpKindRemoveReplica], stats[meta.OpKindTransferLeader]),
			countsLine(v),
		}
	}
	fail("unknown command %q", cmd)
	return nil
}

// countsLine is "after: ID=replicas/leaders ..." for every node.
func countsLine(v View) string {
	replicas, leaders := counts(v)
	var b strings.Builder
	b.WriteString("after:")
	for _, n := range v.Nodes {
		fmt.Fprintf(&b, " %d=%d/%d", n.ID, replicas[n.ID], leaders[n.ID])
	}
	return b.String()
}

func parseView(lines []string) (View, error) {
	var v View
	for _, l := range lines {
		kind, args := splitArgs(l)
		switch kind {
		case "node":
			n := Node{ID: meta.NodeID(atoi(args["0"])), State: NodeActive}
			if s, ok := args["1"]; ok {
				n.State = NodeState(s)
			}
			if z, ok := args["zone"]; ok {
				n.Labels = map[string]string{"zone": z}
			}
			if d, ok := args["disk"]; ok {
				n.DiskBytes = int64(atoi(d))
			}
			v.Nodes = append(v.Nodes, n)
		case "shard":
			s := Shard{ID: meta.EventShardID(atoi(args["0"])), ReplicationFactor: atoi(args["rf"]),
				Leader: meta.NodeID(atoi(args["leader"]))}
			for _, r := range strings.Split(args["on"], ",") {
				if r != "" {
					s.Replicas = append(s.Replicas, meta.NodeID(atoi(r)))
				}
			}
			v.Shards = append(v.Shards, s)
		case "inprogress":
			to := meta.DefaultStepTimeouts()
			sh, from := meta.EventShardID(atoi(args["shard"])), meta.NodeID(atoi(args["from"]))
			dst, leader := meta.NodeID(atoi(args["to"])), meta.NodeID(atoi(args["leader"]))
			ops := map[string]meta.Operation{
				"move":     meta.NewMoveReplica(sh, from, dst, leader, "test", to),
				"add":      meta.NewAddReplica(sh, dst, from, "test", to),
				"remove":   meta.NewRemoveReplica(sh, from, leader, false, "test", to),
				"transfer": meta.NewTransferLeader(sh, from, dst, "test", to),
			}
			op, ok := ops[args["0"]]
			if !ok {
				return View{}, fmt.Errorf("unknown operation %q", args["0"])
			}
			if st, ok := args["status"]; ok {
				op.Status = meta.OperationStatus(st)
			}
			v.InProgress = append(v.InProgress, op)
		default:
			return View{}, fmt.Errorf("unknown line %q", l)
		}
	}
	return v, nil
}

// splitArgs splits "cmd a b k=v" into "cmd" and {"0": a, "1": b, "k": v}.
func splitArgs(line string) (string, map[string]string) {
	fields := strings.Fields(line)
	args := map[string]string{}
	if len(fields) == 0 {
		return "", args
	}
	pos := 0
	for _, f := range fields[1:] {
		if k, v, ok := strings.Cut(f, "="); ok {
			args[k] = v
		} else {
			args[strconv.Itoa(pos)] = f
			pos++
		}
	}
	return fields[0], args
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
