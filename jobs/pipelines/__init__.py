"""Pipeline jobs (``python -m jobs <pipeline>``): bronze Delta table -> silver tables, one module each."""
