"""The base every room uses: one-line errors (`errors`), console output, atomic writes and tables
(`output`), the name → builder registry (`registry`).
"""
