// Universal Sentence Encoder lite's forward pass written out with
// TensorFlow.js ops, over the weights of the loaded graph model.
//
// Why: the packaged graph is a TensorFlow export of 256 nodes, most of them
// shape arithmetic (Shape, StridedSlice, Pack, ConcatV2, Prod...) and
// scatter/gather between dense and sparse layouts. Each node costs a kernel
// dispatch, about 4 ms per call in all here whatever the text's length, and
// the two dynamic nodes (Where) force the slower async executor. A search
// query is one or two short sentences, so that overhead was most of its
// embedding time. The same computation as about 40 ops, with every
// sentence's tokens packed into one matrix (no padding for the per-token
// matrix products), gives the same vectors; local-worker.mjs checks that
// against the graph when the model loads and keeps the graph otherwise.
//
// The model (from the graph): tokens → embeddings (256) ×2 + sinusoidal
// timing signal → transformer layer 0 (256 → 512; 4 heads of 64; its
// residual goes through a dense 256 → 512) → transformer layer 1 (512; 4
// heads of 128) → mean over the sentence's tokens → tanh dense 512 → unit
// length. Each layer: pre-norm attention with a residual, then pre-norm
// feed-forward (1536, ReLU) with a residual. Texts keep their first 128 tokens.
import tf from '@energetic-ai/core';

const K = 'module_apply_default/Encoder_en/KonaTransformer/';
const STACK = `${K}Encode/TransformerStack/`;

/** Tokens per text the graph keeps (its ClipToMaxLength). */
export const MAX_TOKENS = 128;

/**
 * @param {import('@tensorflow/tfjs-converter').GraphModel} graph the loaded model
 * @returns {(tokenLists: number[][]) => Float32Array} row after row, 512 numbers per text; every list holds 1..MAX_TOKENS tokens
 */
export function useLiteEncoder(graph) {
  /** @param {string} name */
  const weight = (name) => {
    const found = graph.weights[name]?.[0];
    if (!found) throw new Error(`USE lite graph: no weight ${name}`);
    return found;
  };
  const scalar = (/** @type {string} */ name) => weight(name).dataSync()[0];
  /** @param {string} name a 1×1 convolution kernel [1, 1, in, out], used as the [in, out] matrix it is */
  const matrix = (name) => {
    const kernel = weight(name);
    return kernel.rank === 4 ? tf.reshape(kernel, kernel.shape.slice(2)) : kernel;
  };
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
      qkv: { kernel: matrix(`${kernels}qkv_transform_single/kernel/part_0`), bias: weight(`${vars}MultiheadAttention/qkv_transform_single/bias/ConcatPartitions/concat`) },
      output: { kernel: matrix(`${kernels}output_transform_single/kernel/part_0`), bias: weight(`${vars}MultiheadAttention/output_transform_single/bias/ConcatPartitions/concat`) },
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

  /** @param {tf.Tensor} x @param {{ kernel: tf.Tensor, bias: tf.Tensor }} dense */
  const affine = (x, dense) => tf.add(tf.matMul(/** @type {tf.Tensor2D} */ (x), /** @type {tf.Tensor2D} */ (dense.kernel)), dense.bias);
  /** The graph's layer norm, op for op: scale · rsqrt(var + ε) · (x − mean) + bias. */
  const normalize = (/** @type {tf.Tensor} */ x, /** @type {{ scale: tf.Tensor, bias: tf.Tensor }} */ norm) => {
    const centered = tf.sub(x, tf.mean(x, -1, true));
    const variance = tf.mean(tf.square(centered), -1, true);
    return tf.add(tf.mul(tf.mul(norm.scale, tf.rsqrt(tf.add(variance, epsilon))), centered), norm.bias);
  };

  /** @param {number[][]} tokenLists */
  const forward = (tokenLists) =>
    tf.tidy(() => {
      const texts = tokenLists.length;
      const packed = tokenLists.flat();
      const rows = packed.length;
      // Every text's tokens are rows of one matrix. Attention is the only step that mixes rows: a bias hides the
      // other texts' rows from each text (softmax gives them exactly zero weight), as padding is hidden in the graph.
      const textOfRow = tokenLists.flatMap((tokens, text) => tokens.map(() => text));
      const otherText = new Float32Array(rows * rows);
      if (texts > 1) for (let i = 0; i < rows; i++) for (let j = 0; j < rows; j++) if (textOfRow[i] !== textOfRow[j]) otherText[i * rows + j] = paddingBias;
      const bias = texts > 1 ? tf.tensor2d(otherText, [rows, rows]) : undefined;

      /** Multi-head self-attention within each text. */
      const attend = (/** @type {tf.Tensor2D} */ qkv, /** @type {(typeof layers)[number]} */ layer) => {
        const { width, heads, headWidth } = layer;
        const [q, k, v] = tf.split(qkv, 3, 1).map((part) => tf.transpose(tf.reshape(part, [rows, heads, headWidth]), [1, 0, 2]));
        const raw = tf.matMul(/** @type {tf.Tensor3D} */ (tf.mul(q, layer.queryScale)), /** @type {tf.Tensor3D} */ (k), false, true);
        const scores = bias ? tf.add(raw, bias) : raw;
        const mixed = tf.matMul(tf.softmax(scores), /** @type {tf.Tensor3D} */ (v));
        return tf.reshape(tf.transpose(mixed, [1, 0, 2]), [rows, width]);
      };

      const tokens = tf.gather(embeddings, tf.tensor1d(packed, 'int32'));
      const angles = tf.mul(tf.tensor2d(tokenLists.flatMap((list) => list.map((_, i) => i)), [rows, 1]), inverseTimescales);
      // The graph adds the embeddings twice: once as the timing signal's input, once as the stream it is added to.
      let stream = tf.add(tokens, tf.add(tokens, tf.concat([tf.sin(angles), tf.cos(angles)], 1)));
      for (const layer of layers) {
        const attended = affine(attend(/** @type {tf.Tensor2D} */ (affine(normalize(stream, layer.attentionNorm), layer.qkv)), layer), layer.output);
        stream = tf.add(attended, layer.residual ? affine(stream, layer.residual) : stream);
        const inner = tf.relu(affine(normalize(stream, layer.feedForwardNorm), layer.inner));
        stream = tf.add(affine(inner, layer.outer), stream);
      }
      // Each text's mean row: one product with a [texts, rows] matrix of 1/length over the text's own rows.
      const averaging = new Float32Array(texts * rows);
      textOfRow.forEach((text, row) => (averaging[text * rows + row] = 1 / tokenLists[text].length));
      const mean = tf.matMul(tf.tensor2d(averaging, [texts, rows]), /** @type {tf.Tensor2D} */ (stream));
      const sentence = tf.tanh(affine(mean, pooled));
      return tf.mul(sentence, tf.rsqrt(tf.maximum(tf.sum(tf.square(sentence), 1, true), normFloor)));
    });

  // The numbers are read outside tidy(): tidy() looks for tensors inside whatever its function returns, and walks a
  // typed array element by element (512 Set insertions per text, the worker's main source of garbage).
  return (tokenLists) => {
    const unit = forward(tokenLists);
    try {
      return /** @type {Float32Array} */ (unit.dataSync());
    } finally {
      unit.dispose();
    }
  };
}
