"""Readers of finished results, above the mission's path (nothing below imports this package).

``compare.py`` is ``dlperf compare``: two versions, sessions or import files, case by case, with
a noise-aware verdict (scipy's Mann-Whitney U). ``factor.py`` is ``dlperf factor``: the ratio of
one factor's two values over every otherwise-equal case. Both read repeats through the door
(``driver.verify``) and released versions as they were published; neither writes anything a
release or an audit reads.
"""
