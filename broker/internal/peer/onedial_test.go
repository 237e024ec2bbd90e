package peer

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestOnlyPeerDialsOtherBrokers keeps the package's invariant: no
// non-test file of the broker module but this package's opens a gRPC
// client connection (grpc.NewClient, grpc.Dial, grpc.DialContext), so
// every call to another broker goes over the one cache, Conns.
func TestOnlyPeerDialsOtherBrokers(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	self, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	var dials []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == self || strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		grpcName := ""
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "google.golang.org/grpc" {
				grpcName = "grpc"
				if imp.Name != nil {
					grpcName = imp.Name.Name
				}
			}
		}
		if grpcName == "" {
			return nil
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == grpcName {
				switch sel.Sel.Name {
				case "NewClient", "Dial", "DialContext":
					rel, _ := filepath.Rel(root, path)
					dials = append(dials, rel+":"+strconv.Itoa(fset.Position(sel.Pos()).Line)+" grpc."+sel.Sel.Name)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dials) > 0 {
		t.Errorf("gRPC connections opened outside package peer (use peer.Conns):\n%s", strings.Join(dials, "\n"))
	}
}
