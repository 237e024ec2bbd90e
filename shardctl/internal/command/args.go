package command

import (
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// reorder moves a leaf command's flags before its positional arguments, so
// "topics create NAME --partitions 4" works: urfave/cli stops parsing flags
// at the first positional argument. Positionals follow a "--", so they may
// start with "-". Tokens it does not understand are left alone for
// urfave/cli to report.
func reorder(app *cli.App, args []string) []string {
	if len(args) == 0 {
		return args
	}
	out := []string{args[0]}
	flags, cmds := app.Flags, app.Commands
	for i := 1; i < len(args); i++ {
		tok := args[i]
		if tok == "--" {
			return append(out, args[i:]...)
		}
		if isFlag(tok) {
			out = append(out, tok)
			if takesValue(flags, tok) && i+1 < len(args) {
				i++
				out = append(out, args[i])
			}
			continue
		}
		idx := slices.IndexFunc(cmds, func(c *cli.Command) bool { return c.HasName(tok) })
		if idx < 0 {
			return append(out, args[i:]...)
		}
		cmd := cmds[idx]
		out = append(out, tok)
		if len(cmd.Subcommands) > 0 {
			flags, cmds = cmd.Flags, cmd.Subcommands
			continue
		}
		return append(out, intersperse(cmd.Flags, args[i+1:])...)
	}
	return out
}

func intersperse(flags []cli.Flag, rest []string) []string {
	var fl, pos []string
	for j := 0; j < len(rest); j++ {
		tok := rest[j]
		if tok == "--" {
			pos = append(pos, rest[j+1:]...)
			break
		}
		if !isFlag(tok) {
			pos = append(pos, tok)
			continue
		}
		fl = append(fl, tok)
		if takesValue(flags, tok) && j+1 < len(rest) {
			j++
			fl = append(fl, rest[j])
		}
	}
	if len(pos) == 0 {
		return fl
	}
	return append(append(fl, "--"), pos...)
}

func isFlag(tok string) bool { return len(tok) > 1 && tok[0] == '-' }

// takesValue reports whether tok (e.g. "--topic", "-o") names a flag that
// consumes the next token.
func takesValue(flags []cli.Flag, tok string) bool {
	name := strings.TrimLeft(tok, "-")
	if strings.Contains(name, "=") {
		return false
	}
	for _, f := range flags {
		if !slices.Contains(f.Names(), name) {
			continue
		}
		_, isBool := f.(*cli.BoolFlag)
		return !isBool
	}
	return false
}
