/** One markdown table a suite reports; `notes` print as a list under it. */
export interface Table {
  title: string;
  columns: string[];
  rows: string[][];
  notes?: string[];
}

/** Pipes inside cells would split columns. */
function cell(text: string): string {
  return text.replaceAll('|', '\\|');
}

export function renderTable(table: Table): string {
  // Level 4: under the run's date (##) and the suite's name (###) in RESULTS.md.
  const lines = [`#### ${table.title}`, ''];
  lines.push(`| ${table.columns.map(cell).join(' | ')} |`);
  lines.push(`| ${table.columns.map(() => '---').join(' | ')} |`);
  for (const row of table.rows) {
    if (row.length !== table.columns.length) {
      throw new Error(`table "${table.title}": a row has ${row.length} cells for ${table.columns.length} columns`);
    }
    lines.push(`| ${row.map(cell).join(' | ')} |`);
  }
  if (table.notes?.length) lines.push('', ...table.notes.map((note) => `- ${note}`));
  return lines.join('\n');
}

/** Fixed decimals; `—` for a value that was not measured. */
export function fmt(value: number | undefined, decimals = 0): string {
  return value === undefined || Number.isNaN(value) ? '—' : value.toFixed(decimals);
}

/** A ratio to a baseline, e.g. `0.62×`. */
export function fmtRatio(value: number | undefined): string {
  return value === undefined || !Number.isFinite(value) ? '—' : `${value.toFixed(2)}×`;
}
