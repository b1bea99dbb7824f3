"""Analyses of finished runs: significance, query categories, hard subsets, lexical overlap and
the paper's tables and figures. They read results directories, never models."""
