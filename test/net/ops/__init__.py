"""Operations (docs/operations.md): the access log and the metrics."""
