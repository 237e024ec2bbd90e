package command

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/jedib0t/go-pretty/v6/table"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"gopkg.in/yaml.v3"

	"github.com/sundialmq/sundial/proto/apierr"
)

// render writes v as JSON or YAML, or calls tab for the table format.
func render(w io.Writer, format string, v any, tab func(io.Writer)) error {
	switch format {
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case "yaml":
		enc := yaml.NewEncoder(w)
		enc.SetIndent(2)
		if err := enc.Encode(v); err != nil {
			return err
		}
		return enc.Close()
	default:
		tab(w)
		return nil
	}
}

// newTable returns a plain, grep-friendly table writing to w.
func newTable(w io.Writer, header ...any) table.Writer {
	t := table.NewWriter()
	t.SetOutputMirror(w)
	t.SetStyle(table.StyleLight)
	t.Style().Options.DrawBorder = false
	t.Style().Options.SeparateColumns = false
	t.Style().Options.SeparateHeader = true
	t.AppendHeader(table.Row(header))
	return t
}

// printError writes err for an operator: the status message, each field
// violation, and a hint where the code suggests one.
func printError(w io.Writer, prefix string, err error) {
	st, ok := status.FromError(err)
	if !ok {
		fmt.Fprintf(w, "%s%v\n", prefix, err)
		return
	}
	fmt.Fprintf(w, "%s%s: %s\n", prefix, strings.ToLower(snake(st.Code())), st.Message())
	for _, v := range apierr.Violations(err) {
		fmt.Fprintf(w, "  - %s: %s\n", v.Field, v.Description)
	}
	switch st.Code() {
	case codes.Unavailable:
		fmt.Fprintln(w, "  hint: is the proxy running and reachable? set it with --proxy or SUNDIAL_PROXY")
	case codes.DeadlineExceeded:
		fmt.Fprintln(w, "  hint: the request timed out; raise --timeout or check the cluster with 'shardctl status'")
	case codes.NotFound:
		fmt.Fprintln(w, "  hint: check the name with 'shardctl topics list'")
	}
}

// snake renders a code as "invalid argument".
func snake(c codes.Code) string {
	s := c.String()
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte(' ')
		}
		b.WriteRune(r)
	}
	return b.String()
}
