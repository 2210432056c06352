"""The model on one page: parameter accounting (``parameters``), the paper's table 3 (``paper``), the cost of each
decoding step with and without the key/value cache (``cost``) and every tensor's shape for one sentence
(``shapes``)."""
