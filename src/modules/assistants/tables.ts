import type { ColumnType, Generated, JSONColumnType } from 'kysely';
import type { ModelSettings, TranscriberSettings, VoiceSettings } from './catalogue.ts';

export type AssistantType = 'inbound' | 'outbound' | 'web';
export type DeliveryStatus = 'pending' | 'succeeded' | 'failed';

export interface TelephonySettings {
  outbound_enabled: boolean;
  max_call_seconds: number;
  record_calls: boolean;
  phone_number_id: string | null;
}

/** A jsonb column with a database default: optional on insert, written as JSON text. */
type JsonWithDefault<T> = ColumnType<T, string | undefined, string>;

/** Row types of migrations/0010_assistants.sql. */
export interface AssistantTables {
  assistants: {
    id: Generated<string>;
    account_id: string;
    name: string;
    type: AssistantType;
    prompt: Generated<string>;
    first_message: Generated<string>;
    voice: JSONColumnType<VoiceSettings>;
    model: JSONColumnType<ModelSettings>;
    transcriptor_options: JSONColumnType<TranscriberSettings>;
    telephony: JSONColumnType<TelephonySettings>;
    webhook_url: string | null;
    webhook_events: JsonWithDefault<string[]>;
    webhook_secret_sealed: string;
    created_by: string | null;
    created_at: Generated<Date>;
    updated_at: Generated<Date>;
    deleted_at: Date | null;
  };
  webhook_deliveries: {
    id: string;
    assistant_id: string;
    account_id: string;
    event: string;
    payload: JSONColumnType<Record<string, unknown>>;
    is_test: Generated<boolean>;
    status: ColumnType<DeliveryStatus, DeliveryStatus | undefined, DeliveryStatus>;
    attempts: Generated<number>;
    last_status_code: number | null;
    last_error: string | null;
    created_at: Generated<Date>;
    completed_at: Date | null;
  };
  webhook_delivery_attempts: {
    id: Generated<string>;
    delivery_id: string;
    attempt: number;
    url: string;
    status_code: number | null;
    latency_ms: number;
    error: string | null;
    created_at: Generated<Date>;
  };
}
