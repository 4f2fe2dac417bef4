"""The views of a study and the formats they are written in.

* :mod:`.by`: one view per question (``report --by NAME``), :data:`~.by.VIEWS`; :func:`~.by.view`;
* :mod:`.render`: one renderer per format (aligned text, CSV, JSON, Markdown, HTML), :data:`~.render.RENDERERS`;
* :mod:`.table`: the :class:`~.table.Table` every view makes and every renderer takes;
* :mod:`.frames`: the frames views share (TOTAL rows, the scope tree, filters); :mod:`.pairs`: the summary's
  (metric, value) pairs written without pandas.
"""
