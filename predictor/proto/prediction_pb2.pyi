from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PredictRequest(_message.Message):
    __slots__ = ("pool_key", "n_features", "features_f32le", "features", "raw", "feature_schema")
    POOL_KEY_FIELD_NUMBER: _ClassVar[int]
    N_FEATURES_FIELD_NUMBER: _ClassVar[int]
    FEATURES_F32LE_FIELD_NUMBER: _ClassVar[int]
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    RAW_FIELD_NUMBER: _ClassVar[int]
    FEATURE_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    pool_key: str
    n_features: int
    features_f32le: bytes
    features: FloatRows
    raw: RawColumns
    feature_schema: str
    def __init__(self, pool_key: _Optional[str] = ..., n_features: _Optional[int] = ..., features_f32le: _Optional[bytes] = ..., features: _Optional[_Union[FloatRows, _Mapping]] = ..., raw: _Optional[_Union[RawColumns, _Mapping]] = ..., feature_schema: _Optional[str] = ...) -> None: ...

class FloatRows(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, values: _Optional[_Iterable[float]] = ...) -> None: ...

class RawColumns(_message.Message):
    __slots__ = ("columns",)
    class ColumnsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: RawColumn
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[RawColumn, _Mapping]] = ...) -> None: ...
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    columns: _containers.MessageMap[str, RawColumn]
    def __init__(self, columns: _Optional[_Mapping[str, RawColumn]] = ...) -> None: ...

class RawColumn(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, values: _Optional[_Iterable[float]] = ...) -> None: ...

class ModelPrediction(_message.Message):
    __slots__ = ("target", "objective", "quantile", "version", "values_f32le")
    TARGET_FIELD_NUMBER: _ClassVar[int]
    OBJECTIVE_FIELD_NUMBER: _ClassVar[int]
    QUANTILE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    VALUES_F32LE_FIELD_NUMBER: _ClassVar[int]
    target: str
    objective: str
    quantile: float
    version: int
    values_f32le: bytes
    def __init__(self, target: _Optional[str] = ..., objective: _Optional[str] = ..., quantile: _Optional[float] = ..., version: _Optional[int] = ..., values_f32le: _Optional[bytes] = ...) -> None: ...

class PredictResponse(_message.Message):
    __slots__ = ("pool_key", "n_rows", "predictions")
    POOL_KEY_FIELD_NUMBER: _ClassVar[int]
    N_ROWS_FIELD_NUMBER: _ClassVar[int]
    PREDICTIONS_FIELD_NUMBER: _ClassVar[int]
    pool_key: str
    n_rows: int
    predictions: _containers.RepeatedCompositeFieldContainer[ModelPrediction]
    def __init__(self, pool_key: _Optional[str] = ..., n_rows: _Optional[int] = ..., predictions: _Optional[_Iterable[_Union[ModelPrediction, _Mapping]]] = ...) -> None: ...
