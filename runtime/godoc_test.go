package runtime_test

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// What `go doc` shows of the public packages speaks of the API, not of the
// files it is written in: a user reads it without the source at hand.
func TestGoDocNamesNoSourceFile(t *testing.T) {
	t.Parallel()
	goFile := regexp.MustCompile(`\b[A-Za-z0-9_]+\.go\b`)
	for _, dir := range []string{".", "metrics"} {
		fset := token.NewFileSet()
		names, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		var files []*ast.File
		for _, name := range names {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
			require.NoError(t, err)
			files = append(files, f)
		}
		d, err := doc.NewFromFiles(fset, files, dir)
		require.NoError(t, err)
		check := func(what, text string) {
			require.Empty(t, goFile.FindAllString(text, -1), "go doc of %s in %s names source files:\n%s", what, dir, text)
		}
		check("the package", d.Doc)
		values := func(vs []*doc.Value) {
			for _, v := range vs {
				check(strings.Join(v.Names, ", "), v.Doc)
			}
		}
		funcs := func(fs []*doc.Func) {
			for _, f := range fs {
				check(f.Name, f.Doc)
			}
		}
		values(d.Consts)
		values(d.Vars)
		funcs(d.Funcs)
		for _, typ := range d.Types {
			check(typ.Name, typ.Doc)
			values(typ.Consts)
			values(typ.Vars)
			funcs(typ.Funcs)
			funcs(typ.Methods)
			// Exported fields' comments, which go doc shows with the type.
			ast.Inspect(typ.Decl, func(n ast.Node) bool {
				if f, ok := n.(*ast.Field); ok && f.Doc != nil && len(f.Names) > 0 && f.Names[0].IsExported() {
					check(typ.Name+"."+f.Names[0].Name, f.Doc.Text())
				}
				return true
			})
		}
	}
}
