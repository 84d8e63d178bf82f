#!/usr/bin/env node
// `npx mcptape …`: runs the mcptape binary of this platform's package (@mcptape/<os>-<cpu>,
// an optional dependency: npm installs the one that fits), the way esbuild and biome ship
// theirs. stdio is inherited, not piped: an MCP client talking to `npx mcptape record …` talks
// to the binary directly, and its exit status (a miss is 1) is passed on.
"use strict";
const { spawnSync } = require("child_process");
const path = require("path");

function binary() {
  if (process.env.MCPTAPE_BIN) return process.env.MCPTAPE_BIN;
  const pkg = `@mcptape/${process.platform}-${process.arch}`;
  try {
    return require.resolve(`${pkg}/bin/mcptape`);
  } catch (e) {
    console.error(
      `mcptape: no binary for ${process.platform}-${process.arch}: the package ${pkg} is not ` +
        "installed (npm skips optional dependencies with --no-optional; reinstall without it)"
    );
    process.exit(69);
  }
}

const run = spawnSync(binary(), process.argv.slice(2), { stdio: "inherit" });
if (run.error) {
  console.error(`mcptape: could not run ${path.basename(String(run.error.path || "mcptape"))}: ${run.error.message}`);
  process.exit(69);
}
if (run.signal) {
  // Ended by a signal: end the same way, so the caller sees what the binary saw.
  process.kill(process.pid, run.signal);
  const n = require("os").constants.signals[run.signal] || 0;
  process.exit(128 + n);
}
process.exit(run.status === null ? 1 : run.status);
