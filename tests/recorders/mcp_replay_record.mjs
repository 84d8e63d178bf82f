#!/usr/bin/env node
// Records a stdio MCP session as mcp-replay fixtures, with mcp-replay's own code.
//
// Usage: node mcp_replay_record.mjs [--scrub FIELD,…] FIXTURE_DIR -- <server command> [args...]
//
// mcp-replay (vendored in ./mcp-replay, built by ./scripts/test with its pinned TypeScript) has
// no proxy and no transport: it records through `McpReplay.addFixture(method, params, response)`
// and writes on `stop()` (its FixtureStore: one FIXTURE_DIR/METHOD_DIR/PARAMSHASH.json per
// method and params, `recordedAt` the time of the addFixture call). Its README's "Option 1" adds
// fixtures in test setup; this relay does the same with a real session: it passes the client's
// stdio to the server and back line by line, untouched, and hands each client request and the
// server's answer to it to addFixture as the answer arrives. What mcp-replay has no place for
// (notifications, the server's requests to the client and their answers) is relayed and not
// recorded. When the client closes its side, the fixtures are saved with `stop()`.

import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { McpReplay } from './mcp-replay/dist/src/index.js';

function usage() {
  process.stderr.write('usage: mcp_replay_record.mjs [--scrub FIELD,…] FIXTURE_DIR -- <server command> [args...]\n');
  process.exit(2);
}

const args = process.argv.slice(2);
let scrubFields = [];
if (args[0] === '--scrub') {
  scrubFields = (args[1] ?? '').split(',').filter(Boolean);
  args.splice(0, 2);
}
if (args.length < 3 || args[1] !== '--') usage();
const [fixtureDir, , ...command] = args;

const replay = new McpReplay({ fixtureDir, scrubFields });
await replay.start();

const server = spawn(command[0], command.slice(1), { stdio: ['pipe', 'pipe', 'inherit'] });
// The client's requests waiting for their answer, by JSON-RPC id.
const pending = new Map();

function parse(line) {
  try {
    const msg = JSON.parse(line);
    return msg && typeof msg === 'object' && !Array.isArray(msg) ? msg : undefined;
  } catch {
    return undefined;
  }
}

createInterface({ input: server.stdout, crlfDelay: Infinity }).on('line', (line) => {
  process.stdout.write(line + '\n');
  const msg = parse(line);
  if (msg && msg.method === undefined && 'id' in msg && pending.has(JSON.stringify(msg.id))) {
    const key = JSON.stringify(msg.id);
    const { method, params } = pending.get(key);
    pending.delete(key);
    replay.addFixture(method, params, msg);
  }
});

let saved;
function save() {
  saved ??= replay.stop();
  return saved;
}

createInterface({ input: process.stdin, crlfDelay: Infinity })
  .on('line', (line) => {
    const msg = parse(line);
    if (msg && typeof msg.method === 'string' && 'id' in msg) {
      pending.set(JSON.stringify(msg.id), { method: msg.method, params: msg.params });
    }
    server.stdin.write(line + '\n');
  })
  .on('close', async () => {
    // The client closed its side: every answer it waited for has come. Save now, before the
    // client's SDK, which waits only briefly for its server to exit, sends SIGTERM.
    server.stdin.end();
    await save();
  });

process.on('SIGTERM', async () => {
  await save();
  server.kill('SIGTERM');
  process.exit(143);
});

server.on('close', async (code, signal) => {
  await save();
  process.exit(code ?? (signal ? 128 : 1));
});
