package reduce

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGeneratedFiles runs both generators into a temporary directory and checks that
// the committed output matches: an edit to a generator without `go generate` fails here.
func TestGeneratedFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("short: builds and runs the generators")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	dir := t.TempDir()
	for gen, outputs := range map[string][]string{
		"gen_scalar.go": {"scalar_gen.go"},
		"gen_asm.go":    {"kernels_amd64.go", "kernels_amd64.s"},
	} {
		out, err := exec.Command(goTool, "run", gen, "-out", dir).CombinedOutput()
		require.NoError(t, err, "go run %s: %s", gen, out)
		for _, name := range outputs {
			want, err := os.ReadFile(filepath.Join(dir, name))
			require.NoError(t, err)
			got, err := os.ReadFile(name)
			require.NoError(t, err)
			if !bytes.Equal(got, want) {
				t.Errorf("%s is not what %s generates: run go generate ./goimpl/reduce", name, gen)
			}
		}
	}
}
