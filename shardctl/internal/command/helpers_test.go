package command

import (
	"io"

	"github.com/urfave/cli/v2"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/status"
)

type spbStatus = spb.Status

var statusFromError = status.FromError

func buildAppForTest() *cli.App { return newApp(nil, io.Discard, io.Discard) }
