export { McpReplay } from './replay.js';
export { FixtureStore } from './fixture-store.js';
export { hashRequest, scrub } from './hash.js';
export type {
  McpRequest,
  McpResponse,
  Fixture,
  IFixtureStore,
  ReplayOptions,
  McpReplayClient,
} from './types.js';
