package bench

import (
	"math"
	"testing"

	"github.com/google/pprof/profile"
)

// cpuProfile builds a CPU profile like the Go runtime's (samples/count,
// cpu/nanoseconds) with one sample per stack. A stack lists function names
// leaf first; a name list joined by "+" is one location whose frames were
// inlined, innermost first.
type stackSample struct {
	frames []string
	nanos  int64
}

func cpuProfile(samples ...stackSample) *profile.Profile {
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:     10_000_000,
	}
	funcs := map[string]*profile.Function{}
	fn := func(name string) *profile.Function {
		if f, ok := funcs[name]; ok {
			return f
		}
		f := &profile.Function{ID: uint64(len(funcs) + 1), Name: name, SystemName: name}
		funcs[name] = f
		p.Function = append(p.Function, f)
		return f
	}
	for _, s := range samples {
		var locs []*profile.Location
		for _, frame := range s.frames {
			loc := &profile.Location{ID: uint64(len(p.Location) + 1)}
			for _, name := range splitInlined(frame) {
				loc.Line = append(loc.Line, profile.Line{Function: fn(name)})
			}
			p.Location = append(p.Location, loc)
			locs = append(locs, loc)
		}
		p.Sample = append(p.Sample, &profile.Sample{Location: locs, Value: []int64{s.nanos / 10_000_000, s.nanos}})
	}
	return p
}

func splitInlined(frame string) []string {
	var out []string
	start := 0
	for i := range len(frame) {
		if frame[i] == '+' {
			out = append(out, frame[start:i])
			start = i + 1
		}
	}
	return append(out, frame[start:])
}

func TestClassifySample(t *testing.T) {
	const (
		fsmUpdate  = "github.com/sundialmq/sundial/broker/internal/fsm.(*StateMachine).Update"
		rsmHandle  = "github.com/lni/dragonboat/v4/internal/rsm.(*StateMachine).handle"
		engine     = "github.com/lni/dragonboat/v4.(*engine).applyWorkerMain"
		grpcWrite  = "google.golang.org/grpc/internal/transport.(*bufWriter).Flush"
		rawSyscall = "internal/runtime/syscall/linux.Syscall6" // Go 1.26's raw syscall
	)
	for _, tc := range []struct {
		name   string
		frames []string
		want   Category
	}{
		{"state machine code", []string{fsmUpdate, rsmHandle, engine, "runtime.goexit"}, CatApply},
		// A Pebble batch write in apply matches the Pebble rule at the leaf
		// and the fsm rule above it: the leaf's rule wins.
		{"two rules match: the leaf one wins", []string{"github.com/cockroachdb/pebble/v2.(*Batch).Set", fsmUpdate, rsmHandle, engine}, CatPebbleWrite},
		{"an inlined leaf frame decides before its caller in the same location",
			[]string{"runtime.memmove", "github.com/cockroachdb/pebble/v2/internal/arenaskl.(*Skiplist).Add+" + fsmUpdate, engine}, CatPebbleWrite},
		{"one frame matching two rules: the earlier rule in the table wins",
			[]string{"github.com/lni/dragonboat/v4/internal/transport.(*Transport).Send", engine}, CatRaftTransport},
		{"the Raft log's fsync, under the raw syscall frames",
			[]string{rawSyscall, "syscall.RawSyscall6", "syscall.Syscall", "syscall.Fdatasync", "github.com/lni/vfs.(*syncingFile).syncFdatasync",
				"github.com/cockroachdb/pebble/record.(*LogWriter).flushPending", "github.com/cockroachdb/pebble/record.(*LogWriter).flushLoop"}, CatRaftLog},
		{"the LogDB's Pebble (unversioned path) is the Raft log",
			[]string{"github.com/cockroachdb/pebble/internal/arenaskl.(*Skiplist).Add", "github.com/cockroachdb/pebble.(*DB).Apply",
				"github.com/lni/dragonboat/v4/internal/logdb.(*db).saveRaftState", engine}, CatRaftLog},
		{"the state DB's sstable write in a compaction",
			[]string{"github.com/cockroachdb/pebble/v2/sstable.(*RawRowWriter).Add", "github.com/cockroachdb/pebble/v2/vfs.(*syncingFile).Write",
				"github.com/cockroachdb/pebble/v2.(*DB).compactAndWrite", "github.com/cockroachdb/pebble/v2.(*DB).compact1"}, CatPebbleCompact},
		{"a Pebble iterator read by the dispatcher",
			[]string{"github.com/cockroachdb/pebble/v2/sstable.(*singleLevelIterator).SeekGE", "github.com/cockroachdb/pebble/v2.(*Iterator).SeekGE",
				"github.com/sundialmq/sundial/broker/internal/dispatch.(*Dispatcher).scan"}, CatPebbleRead},
		{"a network write is a syscall, not gRPC", []string{rawSyscall, "syscall.Syscall", "syscall.write", "internal/poll.(*FD).Write", "net.(*conn).Write", grpcWrite}, CatSyscall},
		{"gRPC framing", []string{"runtime.memmove", "golang.org/x/net/http2.(*Framer).WriteData", grpcWrite}, CatGRPC},
		{"proto encoding in apply", []string{"google.golang.org/protobuf/internal/impl.(*MessageInfo).marshal", "google.golang.org/protobuf/proto.Marshal", fsmUpdate}, CatProtobuf},
		{"a GC assist inside gRPC", []string{"runtime.scanobject", "runtime.gcDrainN", "runtime.gcAssistAlloc1", "runtime.gcAssistAlloc", "runtime.mallocgc", grpcWrite}, CatGC},
		{"a goroutine parking", []string{"runtime.futex", "runtime.futexsleep", "runtime.notesleep", "runtime.stopm", "runtime.findRunnable", "runtime.schedule", "runtime.park_m", "runtime.mcall"}, CatScheduler},
		{"the proxy's own code", []string{"github.com/sundialmq/sundial/proxy/internal/batch.split", "github.com/sundialmq/sundial/proxy.producer.Publish"}, CatSundial},
		{"Raft stepping", []string{"github.com/lni/dragonboat/v4/internal/raft.(*raft).Handle", engine}, CatRaft},
		{"no rule matches", []string{"runtime.memmove", "runtime.mallocgc", "main.main", "runtime.main", "runtime.goexit"}, CatOther},
		{"an empty stack", nil, CatOther},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := cpuProfile(stackSample{tc.frames, 10_000_000})
			if got := classifySample(p.Sample[0]); got != tc.want {
				t.Fatalf("classifySample(%v) = %q, want %q", tc.frames, got, tc.want)
			}
		})
	}
}

func TestClassifySumsCPUNanoseconds(t *testing.T) {
	p := cpuProfile(
		stackSample{[]string{"github.com/sundialmq/sundial/broker/internal/fsm.(*StateMachine).Update"}, 30_000_000},
		stackSample{[]string{"github.com/sundialmq/sundial/broker/internal/fsm.(*StateMachine).Update"}, 20_000_000},
		stackSample{[]string{"runtime.gcBgMarkWorker"}, 40_000_000},
		stackSample{[]string{"main.main"}, 10_000_000},
	)
	b := Classify(p)
	if math.Abs(b.Seconds-0.1) > 1e-9 {
		t.Fatalf("Classify().Seconds = %v, want 0.1", b.Seconds)
	}
	if len(b.Categories) != len(Categories) {
		t.Fatalf("Classify() has %d categories, want every one of %d", len(b.Categories), len(Categories))
	}
	for _, tc := range []struct {
		c    Category
		want float64
	}{{CatApply, 0.5}, {CatGC, 0.4}, {CatOther, 0.1}, {CatRaft, 0}} {
		if got := b.Share(tc.c); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Classify().Share(%s) = %v, want %v", tc.c, got, tc.want)
		}
	}
	sum := b.add(b)
	if math.Abs(sum.Seconds-0.2) > 1e-9 || math.Abs(sum.Share(CatApply)-0.5) > 1e-9 {
		t.Errorf("add(itself) = %v s, apply share %v, want 0.2 s, 0.5", sum.Seconds, sum.Share(CatApply))
	}
}
