import type { Suite } from '../lib/suite.ts';
import { foundation } from './foundation.ts';
import { auth } from './auth.ts';
import { chat } from './chat.ts';
import { kb } from './kb.ts';
import { load } from './load.ts';

/** Every suite, in the order a full `npm run bench` runs them. Add new suites here. */
export const SUITES: readonly Suite[] = [foundation, auth, chat, kb, load];
