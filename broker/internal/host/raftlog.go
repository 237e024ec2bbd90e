package host

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/lni/dragonboat/v4/logger"
	"go.uber.org/zap"
)

// Dragonboat's logger factory is process-global and may be set only once;
// every broker in the process (tests run several) shares this adapter, which
// writes to the logger of the broker started most recently.
var (
	raftLogOnce sync.Once
	raftLog     atomic.Pointer[zap.Logger]
)

func installRaftLogger(log *zap.Logger) {
	raftLog.Store(log.Named("dragonboat"))
	raftLogOnce.Do(func() {
		logger.SetLoggerFactory(func(pkg string) logger.ILogger {
			l := &raftLogger{pkg: pkg}
			switch pkg {
			case "raft", "rsm", "transport", "logdb", "grpc", "dragonboat", "config", "settings":
				l.level.Store(int32(logger.ERROR))
			default:
				l.level.Store(int32(logger.WARNING))
			}
			return l
		})
	})
}

// raftLogger adapts Dragonboat's printf logging to zap.
type raftLogger struct {
	pkg   string
	level atomic.Int32
}

func (l *raftLogger) SetLevel(level logger.LogLevel) { l.level.Store(int32(level)) }

func (l *raftLogger) enabled(level logger.LogLevel) bool { return int32(level) <= l.level.Load() }

func (l *raftLogger) write(level logger.LogLevel, format string, args []interface{}) {
	if !l.enabled(level) {
		return
	}
	log := raftLog.Load()
	msg := fmt.Sprintf(format, args...)
	fields := []zap.Field{zap.String("pkg", l.pkg), zap.String("detail", msg)}
	switch level {
	case logger.DEBUG:
		log.Debug("raft debug", fields...)
	case logger.INFO:
		log.Info("raft info", fields...)
	case logger.WARNING:
		log.Warn("raft warning", fields...)
	default:
		log.Error("raft error", fields...)
	}
}

func (l *raftLogger) Debugf(f string, a ...interface{})   { l.write(logger.DEBUG, f, a) }
func (l *raftLogger) Infof(f string, a ...interface{})    { l.write(logger.INFO, f, a) }
func (l *raftLogger) Warningf(f string, a ...interface{}) { l.write(logger.WARNING, f, a) }
func (l *raftLogger) Errorf(f string, a ...interface{})   { l.write(logger.ERROR, f, a) }

// Panicf is how Dragonboat stops on what it cannot go on from. A data dir
// fault (dataDirFault: a log behind the cluster, a corrupt log file) is
// raised as a *DataDirError, one clear message without a stack; anything
// else is logged and panics as Dragonboat meant.
func (l *raftLogger) Panicf(f string, a ...interface{}) {
	msg := fmt.Sprintf(f, a...)
	var dir string
	var node uint64
	if d := faultDir.Load(); d != nil {
		dir, node = d.dir, d.node
	}
	if err := dataDirFault(msg, dir, node); err != nil {
		raiseFault(err)
	}
	l.write(logger.CRITICAL, f, a)
	panic(msg)
}
