// Public entry point: `import { Tessera } from 'tessera-db'`.
export { ErrorKind, TesseraError, type Winner } from './core/errors.js';
export type { TesseraOptions } from './main/config.js';
export {
  type Entry,
  type FragmentHealth,
  type Health,
  type Key,
  type ReadOptions,
  type Settled,
  type SubscribeTo,
  Tessera,
  type Value,
  type WriteOptions,
} from './main/node.js';
export type { PubSubMessage } from './main/pubsub.js';
export type { ScanOptions, ScanResult } from './main/scanner.js';
export type { BackupReport } from './native-bindings/backup.js';
export type { EvictionPolicy } from './native-bindings/kv-store.js';
