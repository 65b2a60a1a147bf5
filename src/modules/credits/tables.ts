import type { ColumnType, Generated, JSONColumnType } from 'kysely';

/**
 * `numeric` comes back from both engines as a decimal string and is written
 * as one, so no amount ever passes through a binary float on its way in.
 */
type Numeric = ColumnType<string, string, string>;
type NumericWithDefault = ColumnType<string, string | undefined, string>;

/** Row types of migrations/0011_credits.sql. */
export interface CreditTables {
  credit_ledger: {
    id: Generated<string>;
    account_id: string;
    amount: Numeric;
    reason: string;
    reference: string | null;
    metadata: JSONColumnType<Record<string, unknown>>;
    balance_after: Numeric;
    created_by: string | null;
    created_at: Generated<Date>;
  };
  credit_balances: {
    id: Generated<string>;
    account_id: string;
    credits: NumericWithDefault;
    total_purchased: NumericWithDefault;
    total_used: NumericWithDefault;
    auto_reload_enabled: Generated<boolean>;
    auto_reload_threshold: NumericWithDefault;
    /** USD cents. */
    auto_reload_amount_minor: Generated<number>;
    created_at: Generated<Date>;
    updated_at: Generated<Date>;
  };
}
