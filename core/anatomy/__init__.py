"""The model on one page: parameter accounting (``parameters``), the paper's table 3 by the same accounting
(``paper``), the cost of each decoding step with and without the key/value cache (``cost``, and ``timing`` measured
on this machine), and every tensor's shape for one sentence (``shapes``)."""

from .cost import DecodingCost, decoding_cost, translation_cost
from .paper import TABLE_3, PaperCount, PaperRow, table_3
from .parameters import Architecture, ParameterBlock, ParameterCheck, ParameterTable, check_parameters, parameter_table
from .shapes import TensorShape, tensor_shapes
from .timing import MeasuredSteps, measure_steps

__all__ = [
    "TABLE_3",
    "Architecture",
    "DecodingCost",
    "MeasuredSteps",
    "PaperCount",
    "PaperRow",
    "ParameterBlock",
    "ParameterCheck",
    "ParameterTable",
    "TensorShape",
    "check_parameters",
    "decoding_cost",
    "measure_steps",
    "parameter_table",
    "table_3",
    "tensor_shapes",
    "translation_cost",
]
