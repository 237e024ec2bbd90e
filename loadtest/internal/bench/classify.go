package bench

import (
	"regexp"

	"github.com/google/pprof/profile"
)

// Category is where a CPU profile sample's time went, named by the part of
// a Sundial server that spent it.
type Category string

// The categories, in report order. Other is a sample no rule matched.
const (
	CatApply         Category = "apply"
	CatPebbleWrite   Category = "pebble_write"
	CatPebbleCompact Category = "pebble_flush_compaction"
	CatPebbleRead    Category = "pebble_read"
	CatRaft          Category = "raft"
	CatRaftLog       Category = "raft_log_fsync"
	CatRaftTransport Category = "raft_transport"
	CatDispatch      Category = "dispatcher"
	CatSundial       Category = "sundial_other"
	CatGRPC          Category = "grpc_http2"
	CatProtobuf      Category = "protobuf"
	CatGC            Category = "gc"
	CatScheduler     Category = "scheduler"
	CatSyscall       Category = "syscalls_other"
	CatOther         Category = "other"
)

// Categories lists every category in report order.
var Categories = []Category{
	CatApply, CatPebbleWrite, CatPebbleCompact, CatPebbleRead, CatRaft, CatRaftLog, CatRaftTransport,
	CatDispatch, CatSundial, CatGRPC, CatProtobuf, CatGC, CatScheduler, CatSyscall, CatOther,
}

// categoryLabels are the report's column headers.
var categoryLabels = map[Category]string{
	CatApply:         "State machine apply",
	CatPebbleWrite:   "Pebble writes",
	CatPebbleCompact: "Pebble flush + compaction",
	CatPebbleRead:    "Pebble reads",
	CatRaft:          "Raft",
	CatRaftLog:       "Raft log write + fsync",
	CatRaftTransport: "Raft transport",
	CatDispatch:      "Dispatcher",
	CatSundial:       "Sundial (other)",
	CatGRPC:          "gRPC + HTTP/2",
	CatProtobuf:      "protobuf",
	CatGC:            "GC",
	CatScheduler:     "Go scheduler",
	CatSyscall:       "syscalls (other)",
	CatOther:         "other",
}

// rule files a frame whose function name matches Frame under Category.
type rule struct {
	Category Category
	Frame    *regexp.Regexp
}

// rules decide a sample's category: the sample's frames are walked from
// the leaf up, and the first frame that some rule matches decides; when
// one frame matches several rules, the earliest rule in this table wins.
// So a rule names the frame that identifies an activity closest to where
// the time was spent: fsm code calling a Pebble batch's Set is a Pebble
// write, a GC assist inside gRPC is GC, and frames shared by several
// activities (Pebble's sstable iterators, read by both user iterators and
// compactions; mallocgc; net.(*conn).Write) match no rule, so the caller
// decides.
//
// Two Pebbles run in a broker: Sundial's state DB is pebble/v2, and
// Dragonboat's LogDB (the Raft log) uses the unversioned module path, with
// its files through github.com/lni/vfs; so every frame of the unversioned
// Pebble is the Raft log's. Every fsync syscall is filed under the Raft log
// too: the state DB commits without sync and fsyncs only at snapshots,
// flushes and compactions.
var rules = []rule{
	{CatGC, regexp.MustCompile(`^runtime\.(gcBgMarkWorker|gcAssistAlloc|gcDrain|gcStart|gcMarkDone|gcMarkTermination|markroot|scanobject|bgsweep|sweepone|\(\*sweepLocked\)\.sweep|bgscavenge|wbBufFlush|_GC$)`)},
	{CatScheduler, regexp.MustCompile(`^runtime\.(schedule|findRunnable|park_m|goschedImpl|gosched_m|gopreempt_m|preemptPark|goexit0|mcall|mstart|newstack|morestack|exitsyscall|entersyscall|reentersyscall|sysmon|retake|wakep|startm|stopm|handoffp|notesleep|notetsleep|notewakeup|ready|goready|gopark|injectglist|netpoll|checkTimers|stealWork|runqgrab|mPark|execute|resetspinning|\(\*timers?\)\.|_System$)`)},
	{CatRaftLog, regexp.MustCompile(`^(syscall|golang\.org/x/sys/unix)\.(Fdatasync|Fsync|SyncFileRange)$`)},
	{CatRaftLog, regexp.MustCompile(`^github\.com/lni/dragonboat/v4/internal/(logdb|tan)[./]|^github\.com/lni/vfs\.|^github\.com/cockroachdb/pebble(\.|/[^v]|/v[^2])`)},
	{CatSyscall, regexp.MustCompile(`^(syscall|golang\.org/x/sys/unix|internal/syscall/unix)\.`)},
	{CatRaftTransport, regexp.MustCompile(`^github\.com/lni/dragonboat/v4/(internal/transport|plugin)[./]`)},
	{CatRaft, regexp.MustCompile(`^github\.com/lni/dragonboat/v4(\.|/internal/|/config\.|/statemachine\.|/raftio\.|/client\.)|^github\.com/lni/goutils[./]`)},
	{CatPebbleRead, regexp.MustCompile(`^github\.com/cockroachdb/pebble/v2\.(\(\*(Iterator|Snapshot)\)\.|\(\*DB\)\.(Get|getInternal|NewIter|newIter)|\(\*Batch\)\.(Get|NewIter))`)},
	{CatPebbleCompact, regexp.MustCompile(`^github\.com/cockroachdb/pebble/v2(\.\(\*DB\)\.(flush|compact|run[A-Za-z]*(Compaction|Flush)|compactAndWrite|maybeSchedule|collectTableStats|deleteObsolete|paceAndDelete)|\.\(\*(tableCompaction|cleanupManager)\)\.|/internal/compact\.)`)},
	{CatPebbleWrite, regexp.MustCompile(`^github\.com/cockroachdb/pebble/v2(\.\(\*(Batch|commitPipeline|memTable)\)\.|\.\(\*DB\)\.(Apply|Set|Delete|DeleteRange|SingleDelete|Merge|LogData|commit|makeRoomForWrite)|/internal/(arenaskl|batchskl)\.|/record\.|/wal\.|/batchrepr\.)`)},
	{CatProtobuf, regexp.MustCompile(`^(google\.golang\.org/protobuf|github\.com/golang/protobuf|github\.com/gogo/protobuf)/`)},
	{CatApply, regexp.MustCompile(`^github\.com/sundialmq/sundial/broker/internal/fsm[./]`)},
	{CatDispatch, regexp.MustCompile(`^github\.com/sundialmq/sundial/broker/internal/dispatch[./]`)},
	{CatSundial, regexp.MustCompile(`^github\.com/sundialmq/sundial/`)},
	{CatGRPC, regexp.MustCompile(`^(google\.golang\.org/grpc|golang\.org/x/net/http2|net/http)[./]`)},
}

// passThrough are frames every syscall goes through (the raw entry into
// the kernel): they match no rule, so the wrapper above them
// (syscall.Fdatasync, syscall.write) decides.
var passThrough = regexp.MustCompile(`^((syscall|golang\.org/x/sys/unix)\.(Raw)?Syscall(6|NoError)?|syscall\.rawsyscalln|syscall\.rawSyscallNoError|(internal/runtime|runtime/internal)/syscall(/linux)?\.)`)

// classifyFrame is the category of the first rule matching fn, if any.
func classifyFrame(fn string) (Category, bool) {
	if passThrough.MatchString(fn) {
		return "", false
	}
	for _, r := range rules {
		if r.Frame.MatchString(fn) {
			return r.Category, true
		}
	}
	return "", false
}

// classifySample is the category of a stack: the first frame from the leaf
// up that a rule matches (inlined frames in their order, innermost first),
// else Other.
func classifySample(s *profile.Sample) Category {
	for _, loc := range s.Location {
		for _, line := range loc.Line {
			if line.Function == nil {
				continue
			}
			if c, ok := classifyFrame(line.Function.Name); ok {
				return c
			}
		}
	}
	return CatOther
}

// Breakdown is CPU time by category.
type Breakdown struct {
	// Seconds is the CPU time of every sample.
	Seconds float64 `json:"seconds"`
	// Categories is Seconds split by category, in Categories order, every
	// category present (0 when none).
	Categories []CategorySeconds `json:"categories"`
}

// CategorySeconds is the CPU time of one category.
type CategorySeconds struct {
	Category Category `json:"category"`
	Seconds  float64  `json:"seconds"`
}

// Share is the fraction of Seconds that c took; 0 when nothing was
// sampled.
func (b Breakdown) Share(c Category) float64 {
	if b.Seconds <= 0 {
		return 0
	}
	for _, cs := range b.Categories {
		if cs.Category == c {
			return cs.Seconds / b.Seconds
		}
	}
	return 0
}

// add is b plus o, category by category.
func (b Breakdown) add(o Breakdown) Breakdown {
	out := Breakdown{Seconds: b.Seconds + o.Seconds}
	for _, c := range Categories {
		out.Categories = append(out.Categories, CategorySeconds{Category: c, Seconds: b.seconds(c) + o.seconds(c)})
	}
	return out
}

func (b Breakdown) seconds(c Category) float64 {
	for _, cs := range b.Categories {
		if cs.Category == c {
			return cs.Seconds
		}
	}
	return 0
}

// Classify splits the CPU time of a CPU profile (the cpu/nanoseconds
// sample value) by category.
func Classify(p *profile.Profile) Breakdown {
	vi := len(p.SampleType) - 1
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			vi = i
		}
	}
	by := map[Category]int64{}
	var total int64
	for _, s := range p.Sample {
		if vi < 0 || vi >= len(s.Value) {
			continue
		}
		v := s.Value[vi]
		by[classifySample(s)] += v
		total += v
	}
	out := Breakdown{Seconds: float64(total) / 1e9}
	for _, c := range Categories {
		out.Categories = append(out.Categories, CategorySeconds{Category: c, Seconds: float64(by[c]) / 1e9})
	}
	return out
}
