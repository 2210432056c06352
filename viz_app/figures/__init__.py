"""Pure Plotly builders: numpy arrays + token lists in, ``go.Figure`` out; no module here imports Streamlit (a
test checks every one), so every figure can be unit-tested and reused elsewhere.

One module per page, plus the shared style:

- ``style``: colours, fonts, token labels and axes, titles and layout (every module uses it)
- ``attention_maps``: one head large, the layer × head grid, heads combined (Overview, Head detail, Positional)
- ``overview``: SSRU gates (Overview) and the as-trained vs switched log-probabilities (the translation header)
- ``masking``: Masks (and Learn's stages); ``positional``: Positional encoding; ``decoding``: Step-by-step;
  ``explain``: Why this word?; ``head_roles``: What does each head do?; ``learn``: Learn's numbers
"""
