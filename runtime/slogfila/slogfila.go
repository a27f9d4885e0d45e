// Package slogfila lets a program that logs with log/slog give Fila its
// logger: Logger turns a *slog.Logger into the *zap.Logger that
// runtime.Config.Logger takes, so Fila's structured entries (every field,
// the component's name, the level) go to the program's slog handler
// beside its own.
//
//	cfg := runtime.Config{DSN: dsn, Logger: slogfila.Logger(slog.Default()), Kinds: kinds}
//
// Fila logs through zap on its hot paths (a disabled level costs no
// allocation there); this adapter asks the handler's Enabled first, so an
// entry the handler would drop is never built.
package slogfila

import (
	"context"
	"log/slog"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Logger returns a *zap.Logger that writes every entry to l's handler:
// zap's level as slog's, the logger's name (runtime.completer, say) as the
// attribute "logger", and each field as an attribute. A nil l is
// slog.Default().
func Logger(l *slog.Logger) *zap.Logger {
	if l == nil {
		l = slog.Default()
	}
	return zap.New(&core{h: l.Handler()})
}

// core is a zapcore.Core that hands entries to a slog.Handler.
type core struct{ h slog.Handler }

// Level maps zap's levels to slog's: debug, info, warn and error are the
// same; zap's DPanic, Panic and Fatal are above slog's error, four apart
// as slog spaces its levels.
func Level(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	case l == zapcore.ErrorLevel:
		return slog.LevelError
	default:
		return slog.LevelError + slog.Level(4*(l-zapcore.ErrorLevel))
	}
}

func (c *core) Enabled(l zapcore.Level) bool { return c.h.Enabled(context.Background(), Level(l)) }

func (c *core) With(fields []zapcore.Field) zapcore.Core {
	return &core{h: c.h.WithAttrs(attrs(fields))}
}

func (c *core) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *core) Write(e zapcore.Entry, fields []zapcore.Field) error {
	r := slog.NewRecord(e.Time, Level(e.Level), e.Message, e.Caller.PC)
	if e.LoggerName != "" {
		r.AddAttrs(slog.String("logger", e.LoggerName))
	}
	r.AddAttrs(attrs(fields)...)
	return c.h.Handle(context.Background(), r)
}

func (c *core) Sync() error { return nil }

// attrs encodes zap fields as slog attributes, in their order. Each field
// is encoded on its own, as zap's JSON encoder would write it (an error
// as its text, a duration as zap encodes it, an object as a map).
func attrs(fields []zapcore.Field) []slog.Attr {
	out := make([]slog.Attr, 0, len(fields))
	for _, f := range fields {
		enc := zapcore.NewMapObjectEncoder()
		f.AddTo(enc)
		if v, ok := enc.Fields[f.Key]; ok {
			out = append(out, slog.Any(f.Key, v))
			delete(enc.Fields, f.Key)
		}
		for k, v := range enc.Fields { // what a field adds beside its key (an error's "…Verbose")
			out = append(out, slog.Any(k, v))
		}
	}
	return out
}
