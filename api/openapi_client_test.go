package api_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/hourglass/hourglass/api"
)

// tsClient uses the generated TypeScript types the way a shop's client
// would: an order to create, the order and the error envelope it gets back.
const tsClient = `import type { paths, components } from "./hourglass";
type Order = components["schemas"]["Order"];
type Create = paths["/v1/orders"]["post"]["requestBody"]["content"]["application/json"];
const req: Create = { user_id: "u1", items: [{ sku: "sku-1", quantity: 1 }], timeout_ms: 60000 };
export async function createOrder(base: string, token: string): Promise<Order> {
  const r = await fetch(base + "/v1/orders", { method: "POST", headers: { Authorization: "Bearer " + token, "Content-Type": "application/json" }, body: JSON.stringify(req) });
  if (r.status !== 201) { const e: components["schemas"]["Error"] = await r.json(); throw new Error(e.error.code + ": " + e.error.message); }
  const o: Order = await r.json();
  const closed: string | null = o.closed_at;
  return closed === null ? o : o;
}
`

// TestOpenAPITypeScriptClient generates TypeScript types from the
// document with openapi-typescript and compiles a client using them with
// tsc --strict. It skips, saying why, when npm or the npm registry is not
// there.
func TestOpenAPITypeScriptClient(t *testing.T) {
	t.Parallel() // a minute of npm and tsc, waiting on nothing of the others'
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm not found: no TypeScript toolchain to compile a generated client (apt-get install npm)")
	}
	npx, err := exec.LookPath("npx")
	if err != nil {
		t.Skip("npx not found: no TypeScript toolchain to compile a generated client")
	}
	dir := t.TempDir()
	run := func(name string, args ...string) ([]byte, error) {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "npm_config_update_notifier=false")
		return cmd.CombinedOutput()
	}
	if out, err := run(npm, "install", "--no-audit", "--no-fund", "--silent", "openapi-typescript@7", "typescript@5"); err != nil {
		t.Skipf("npm install openapi-typescript typescript failed (is the npm registry reachable?): %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "openapi.json"), api.OpenAPI(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "client.ts"), []byte(tsClient), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run(npx, "--no-install", "openapi-typescript", "openapi.json", "-o", "hourglass.d.ts"); err != nil {
		t.Fatalf("openapi-typescript: %v\n%s", err, out)
	}
	if out, err := run(npx, "--no-install", "tsc", "--strict", "--noEmit", "--lib", "es2022,dom", "--target", "es2022",
		"--module", "es2022", "--moduleResolution", "bundler", "client.ts"); err != nil {
		t.Fatalf("tsc: the generated client does not compile: %v\n%s", err, out)
	}
}
