import type { FieldError } from '../../platform/http/errors.ts';

/**
 * The one list of what an assistant can be built from: language-model
 * providers and their models, voice providers and their voices, transcriber
 * providers with their models and languages. Requests are validated against
 * it and GET /api/assistants/catalogue shows it, so a client and the server
 * can never disagree about which combinations exist. Model names carry the
 * `llm-` prefix (spec, neutral stand-ins).
 */

export interface LlmProvider {
  name: string;
  models: readonly string[];
}

export interface Voice {
  id: string;
  name: string;
  /** BCP 47 tags; `multi` speaks whatever language the text is in. */
  languages: readonly string[];
}

export interface VoiceProvider {
  name: string;
  voices: readonly Voice[];
}

export interface TranscriberProvider {
  name: string;
  models: readonly string[];
  languages: readonly string[];
}

export const LLM_PROVIDERS = {
  openai: { name: 'OpenAI-compatible', models: ['llm-5-nano', 'llm-4.1', 'llm-4.1-mini', 'llm-4.1-nano', 'llm-4o', 'llm-4o-mini'] },
  anthropic: { name: 'Anthropic', models: ['llm-sonnet-4', 'llm-haiku-3.5'] },
  groq: { name: 'Groq', models: ['llm-llama-3.3-70b', 'llm-llama-3.1-8b'] },
} as const satisfies Record<string, LlmProvider>;

export const VOICE_PROVIDERS = {
  openai: {
    name: 'OpenAI-compatible TTS',
    voices: ['alloy', 'ash', 'coral', 'echo', 'nova', 'sage', 'shimmer'].map((id) => ({ id, name: id[0]!.toUpperCase() + id.slice(1), languages: ['multi'] })),
  },
  elevenlabs: {
    name: 'ElevenLabs',
    voices: [
      { id: 'rachel', name: 'Rachel', languages: ['multi'] },
      { id: 'adam', name: 'Adam', languages: ['multi'] },
      { id: 'bella', name: 'Bella', languages: ['multi'] },
    ],
  },
  azure: {
    name: 'Azure Neural TTS',
    voices: [
      { id: 'en-US-JennyNeural', name: 'Jenny', languages: ['en-US'] },
      { id: 'en-GB-SoniaNeural', name: 'Sonia', languages: ['en-GB'] },
      { id: 'de-DE-KatjaNeural', name: 'Katja', languages: ['de-DE'] },
      { id: 'fr-FR-DeniseNeural', name: 'Denise', languages: ['fr-FR'] },
      { id: 'es-ES-ElviraNeural', name: 'Elvira', languages: ['es-ES'] },
    ],
  },
} as const satisfies Record<string, VoiceProvider>;

const COMMON_LANGUAGES = ['en', 'en-US', 'en-GB', 'de', 'fr', 'es', 'it', 'nl', 'pt'] as const;

export const TRANSCRIBER_PROVIDERS = {
  openai: { name: 'OpenAI-compatible transcription', models: ['llm-4o-mini-transcribe'], languages: [...COMMON_LANGUAGES, 'multi'] },
  deepgram: { name: 'Deepgram', models: ['nova-3', 'nova-2'], languages: [...COMMON_LANGUAGES, 'multi'] },
  assemblyai: { name: 'AssemblyAI', models: ['universal-streaming'], languages: ['en', 'en-US', 'en-GB'] },
} as const satisfies Record<string, TranscriberProvider>;

/** What a new assistant gets for each setting it leaves out: one provider end to end. */
export const DEFAULT_MODEL = { provider: 'openai', model: 'llm-4o-mini' } as const;
export const DEFAULT_VOICE = { provider: 'openai', voice_id: 'alloy' } as const;
export const DEFAULT_TRANSCRIBER = { provider: 'openai', model: 'llm-4o-mini-transcribe', language: 'en' } as const;

export interface ModelSettings {
  provider: string;
  model: string;
}

export interface VoiceSettings {
  provider: string;
  voice_id: string;
}

export interface TranscriberSettings {
  provider: string;
  model: string;
  language: string;
}

function lookup<T>(table: Record<string, T>, key: string): T | undefined {
  return Object.hasOwn(table, key) ? table[key] : undefined;
}

function unknownProvider(field: string, table: Record<string, unknown>): FieldError {
  return { field, message: `must be one of ${Object.keys(table).join(', ')}` };
}

/**
 * Every problem with a complete model / voice / transcriber setting, with
 * `field` naming the part at fault (`model.model`, `voice.voice_id`, ...). A
 * member is only checked against a provider that exists, so an unknown
 * provider is one error, not two.
 */
export function modelProblems(model: ModelSettings): FieldError[] {
  const provider = lookup<LlmProvider>(LLM_PROVIDERS, model.provider);
  if (!provider) return [unknownProvider('model.provider', LLM_PROVIDERS)];
  if (!provider.models.includes(model.model)) {
    return [{ field: 'model.model', message: `"${model.model}" is not a model of provider ${model.provider}; use one of ${provider.models.join(', ')}` }];
  }
  return [];
}

export function voiceProblems(voice: VoiceSettings): FieldError[] {
  const provider = lookup<VoiceProvider>(VOICE_PROVIDERS, voice.provider);
  if (!provider) return [unknownProvider('voice.provider', VOICE_PROVIDERS)];
  if (!provider.voices.some((v) => v.id === voice.voice_id)) {
    return [{ field: 'voice.voice_id', message: `"${voice.voice_id}" is not a voice of provider ${voice.provider}; use one of ${provider.voices.map((v) => v.id).join(', ')}` }];
  }
  return [];
}

export function transcriberProblems(options: TranscriberSettings): FieldError[] {
  const provider = lookup<TranscriberProvider>(TRANSCRIBER_PROVIDERS, options.provider);
  if (!provider) return [unknownProvider('transcriptor_options.provider', TRANSCRIBER_PROVIDERS)];
  const problems: FieldError[] = [];
  if (!provider.models.includes(options.model)) {
    problems.push({ field: 'transcriptor_options.model', message: `"${options.model}" is not a model of provider ${options.provider}; use one of ${provider.models.join(', ')}` });
  }
  if (!provider.languages.includes(options.language)) {
    problems.push({ field: 'transcriptor_options.language', message: `"${options.language}" is not a language of provider ${options.provider}; use one of ${provider.languages.join(', ')}` });
  }
  return problems;
}

/** The catalogue as GET /api/assistants/catalogue shows it: arrays, in a stable order. */
export function publicCatalogue() {
  return {
    llm: Object.entries(LLM_PROVIDERS).map(([id, p]) => ({ id, name: p.name, models: [...p.models] })),
    voice: Object.entries(VOICE_PROVIDERS).map(([id, p]) => ({ id, name: p.name, voices: p.voices.map((v) => ({ id: v.id, name: v.name, languages: [...v.languages] })) })),
    transcriber: Object.entries(TRANSCRIBER_PROVIDERS).map(([id, p]) => ({ id, name: p.name, models: [...p.models], languages: [...p.languages] })),
    defaults: { model: DEFAULT_MODEL, voice: DEFAULT_VOICE, transcriptor_options: DEFAULT_TRANSCRIBER },
  };
}
