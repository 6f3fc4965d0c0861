"""One module per notebook: the orchestration and the tables/figures of notebooks/NN_<name>.ipynb."""
