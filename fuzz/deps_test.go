package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The dependency table of the root README (each module and what it depends
// on only), as code. A module may import the standard library, itself, and
// what its row lists; nothing else.
const prefix = "github.com/hotpath-go/hotpath/"

var allowed = map[string][]string{
	"wsframe":      nil,
	"segmentqueue": nil,
	"dispatch":     nil,
	"emitter":      nil,
	"scheduler":    nil,
	"corkwriter":   {"golang.org/x/sys"},
	"deflatecache": {"github.com/klauspost/compress", prefix + "wsframe"},
	"dictionary":   {"github.com/klauspost/compress"},
}

// peers are the libraries hotpath is compared with. They may appear only in
// bench and fuzz, never in a module a user imports.
var peers = []string{
	"github.com/gorilla/websocket",
	"github.com/lxzan/gws",
	"github.com/coder/websocket",
	"nhooyr.io/websocket",
	"github.com/lesismal/nbio",
}

// compatForbidden lists what compat may not import: peers, and the two
// modules that exist only to measure and attack it.
var compatForbidden = append([]string{prefix + "bench", prefix + "fuzz"}, peers...)

func hasPathPrefix(path, p string) bool {
	return path == p || strings.HasPrefix(path, p+"/")
}

func isStd(importPath string) bool {
	first, _, _ := strings.Cut(importPath, "/")
	return !strings.Contains(first, ".")
}

// checkImport reports whether module mod (a directory name of the workspace)
// may import importPath, by the table above.
func checkImport(mod, importPath string) error {
	if isStd(importPath) || hasPathPrefix(importPath, prefix+mod) {
		return nil
	}
	switch mod {
	case "bench", "fuzz":
		return nil
	case "compat":
		for _, f := range compatForbidden {
			if hasPathPrefix(importPath, f) {
				return fmt.Errorf("compat imports %s: peers and bench/fuzz are not allowed in compat", importPath)
			}
		}
		return nil
	}
	rules, ok := allowed[mod]
	if !ok {
		return fmt.Errorf("module %s has no row in the dependency table", mod)
	}
	for _, r := range rules {
		if hasPathPrefix(importPath, r) {
			return nil
		}
	}
	return fmt.Errorf("%s imports %s: its row allows only the standard library%s", mod, importPath, listSuffix(rules))
}

func listSuffix(rules []string) string {
	if len(rules) == 0 {
		return ""
	}
	return " and " + strings.Join(rules, ", ")
}

// checkRequire reports whether module mod may list modPath in a require
// directive of its go.mod. Leaf modules list only what their row allows
// (and what those bring indirectly); no module but bench and fuzz lists a
// peer, even indirectly.
func checkRequire(mod, modPath string, indirect bool) error {
	if mod == "bench" || mod == "fuzz" {
		return nil
	}
	for _, p := range peers {
		if hasPathPrefix(modPath, p) {
			return fmt.Errorf("%s/go.mod requires peer library %s", mod, modPath)
		}
	}
	if mod == "compat" || indirect {
		return checkImport("compat", modPath)
	}
	return checkImport(mod, modPath)
}

func workspaceRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOWORK").Output()
	if err != nil {
		t.Fatalf("go env GOWORK: %v", err)
	}
	gowork := strings.TrimSpace(string(out))
	if gowork == "" || gowork == "off" {
		t.Skip("not in the hotpath workspace")
	}
	return filepath.Dir(gowork)
}

func workspaceModules(t *testing.T, root string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	var mods []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		line = strings.TrimPrefix(line, "use ")
		if strings.HasPrefix(line, "./") {
			mods = append(mods, strings.TrimPrefix(line, "./"))
		}
	}
	if len(mods) == 0 {
		t.Fatal("go.work lists no modules")
	}
	return mods
}

// requires parses the require directives of a go.mod, both the one-line and
// the block form.
func requires(data []byte) (paths []string, indirect []bool) {
	inBlock := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "require (":
			inBlock = true
			continue
		case inBlock && line == ")":
			inBlock = false
			continue
		case strings.HasPrefix(line, "require "):
			line = strings.TrimSpace(strings.TrimPrefix(line, "require "))
		case !inBlock:
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 || strings.HasPrefix(fields[0], "//") {
			continue
		}
		paths = append(paths, fields[0])
		indirect = append(indirect, strings.Contains(line, "// indirect"))
	}
	return paths, indirect
}

func TestModuleRequiresFollowDependencyTable(t *testing.T) {
	root := workspaceRoot(t)
	for _, mod := range workspaceModules(t, root) {
		data, err := os.ReadFile(filepath.Join(root, mod, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(data, []byte("module "+prefix+mod+"\n")) {
			t.Errorf("%s/go.mod: module path is not %s%s", mod, prefix, mod)
		}
		paths, indirect := requires(data)
		for i, p := range paths {
			if err := checkRequire(mod, p, indirect[i]); err != nil {
				t.Error(err)
			}
		}
	}
}

func TestModuleImportsFollowDependencyTable(t *testing.T) {
	root := workspaceRoot(t)
	for _, mod := range workspaceModules(t, root) {
		cmd := exec.Command("go", "list", "-e",
			"-f", `{{.ImportPath}}|{{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}`,
			prefix+mod+"/...")
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list %s: %v", mod, err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			pkg, imports, _ := strings.Cut(line, "|")
			for _, imp := range strings.Fields(imports) {
				if err := checkImport(mod, imp); err != nil {
					t.Errorf("package %s: %v", pkg, err)
				}
			}
		}
	}
}

// TestDependencyCheckRejects proves the checks above can fail.
func TestDependencyCheckRejects(t *testing.T) {
	bad := []struct{ mod, imp string }{
		{"wsframe", "github.com/hotpath-go/hotpath/segmentqueue"},
		{"segmentqueue", "golang.org/x/sys/unix"},
		{"corkwriter", "github.com/klauspost/compress/flate"},
		{"deflatecache", "github.com/gobwas/ws"},
		{"dictionary", "github.com/hotpath-go/hotpath/wsframe"},
		{"compat", "github.com/gorilla/websocket"},
		{"compat", "github.com/lxzan/gws"},
		{"compat", "github.com/hotpath-go/hotpath/bench"},
		{"scheduler", "github.com/coder/websocket"},
	}
	for _, b := range bad {
		if err := checkImport(b.mod, b.imp); err == nil {
			t.Errorf("checkImport(%s, %s) accepted a forbidden import", b.mod, b.imp)
		}
	}
	good := []struct{ mod, imp string }{
		{"wsframe", "unicode/utf8"},
		{"corkwriter", "golang.org/x/sys/unix"},
		{"deflatecache", "github.com/klauspost/compress/flate"},
		{"deflatecache", "github.com/hotpath-go/hotpath/wsframe"},
		{"compat", "github.com/gobwas/ws/wsutil"},
		{"compat", "github.com/hotpath-go/hotpath/deflatecache"},
		{"compat", "github.com/quic-go/quic-go"},
		{"bench", "github.com/gorilla/websocket"},
	}
	for _, g := range good {
		if err := checkImport(g.mod, g.imp); err != nil {
			t.Errorf("checkImport(%s, %s): %v", g.mod, g.imp, err)
		}
	}
	if err := checkRequire("compat", "github.com/coder/websocket", true); err == nil {
		t.Error("checkRequire accepted a peer in compat/go.mod")
	}
	paths, indirect := requires([]byte("module x\n\nrequire a.b/c v1\n\nrequire (\n\td.e/f v2 // indirect\n\tg.h/i v3\n)\n"))
	if strings.Join(paths, ",") != "a.b/c,d.e/f,g.h/i" || fmt.Sprint(indirect) != "[false true false]" {
		t.Errorf("requires parsed %v %v", paths, indirect)
	}
}
