/** Row types of this module's tables (filled in with its migration). */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface AiTables {}
