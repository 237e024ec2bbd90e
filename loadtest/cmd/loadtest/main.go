// Command loadtest drives load against Sundial. See internal/command.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sundialmq/sundial/loadtest/internal/command"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := command.Run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
