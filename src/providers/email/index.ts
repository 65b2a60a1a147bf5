import nodemailer from 'nodemailer';
import type { Logger } from 'pino';
import type { Kysely } from 'kysely';
import type { Database, Tx } from '../../platform/db/database.ts';
import type { Tables } from '../../platform/db/tables.ts';
import { defineJob, type JobQueue } from '../../platform/jobs/queue.ts';

export interface Email {
  to: string;
  subject: string;
  text: string;
  /** What the email is for (confirm_email, magic_link, invitation, ...), kept in the outbox. */
  kind: string;
}

export const SEND_EMAIL_JOB = 'email.send';

/**
 * Every email is first written to the outbox table, in the caller's
 * transaction. With SMTP_URL set, a job delivers it (retried on failure);
 * without, the outbox is the delivery (and the log says so), which keeps a
 * fresh install and the tests self-contained.
 */
export class Mailer {
  constructor(
    private readonly jobs: JobQueue,
    private readonly logger: Logger,
    private readonly smtpUrl: string | undefined,
  ) {}

  async send(trx: Tx, email: Email): Promise<string> {
    const row = await (trx as Kysely<Tables>)
      .insertInto('email_outbox')
      .values({ to_email: email.to, subject: email.subject, body_text: email.text, kind: email.kind })
      .returning('id')
      .executeTakeFirstOrThrow();
    if (this.smtpUrl) {
      await this.jobs.send(SEND_EMAIL_JOB, { outboxId: row.id }, { trx });
    } else {
      this.logger.info({ outboxId: row.id, kind: email.kind }, 'email stored in outbox (SMTP_URL not set)');
    }
    return row.id;
  }
}

export function sendEmailJob(db: Database, smtpUrl: string | undefined, from: string) {
  const transport = smtpUrl ? nodemailer.createTransport(smtpUrl) : undefined;
  return defineJob<{ outboxId: string }>({
    name: SEND_EMAIL_JOB,
    retryLimit: 5,
    retryDelaySeconds: 10,
    async handler({ outboxId }) {
      if (!transport) return;
      const email = await db.kysely.selectFrom('email_outbox').selectAll().where('id', '=', outboxId).executeTakeFirst();
      if (!email || email.sent_at) return;
      try {
        await transport.sendMail({ from, to: email.to_email, subject: email.subject, text: email.body_text });
        await db.kysely.updateTable('email_outbox').set({ sent_at: new Date(), last_error: null }).where('id', '=', outboxId).execute();
      } catch (error) {
        await db.kysely.updateTable('email_outbox').set({ last_error: (error as Error).message }).where('id', '=', outboxId).execute();
        throw error;
      }
    },
  });
}
