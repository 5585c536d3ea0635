"""Figures: matplotlib figures of a head table (plots) and the plotly figures of the comparison report."""
