import fs from 'node:fs';

/** Resident set size of a live process, in MiB, from /proc/<pid>/status (Linux only). */
export function rssMiB(pid: number): number {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const match = /^VmRSS:\s+(\d+)\s+kB$/m.exec(status);
  if (!match) throw new Error(`no VmRSS in /proc/${pid}/status (has the process exited?)`);
  return Number(match[1]) / 1024;
}
