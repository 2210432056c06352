"""The Corpus page's parts: the scans the server keeps (``store``), the table, its filters and downloads
(``table``). The page, views/corpus.py, picks the input, runs the scan and shows the results."""
