"""What each command asks, composed once from typed options: the report study (:mod:`.study`), serving
(:mod:`.serve`), the training plan (:mod:`.plan`), the sweep (:mod:`.sweep`), the FLOP baselines
(:mod:`.baseline`), and the answer the reader's child renders whole (:mod:`.compose`). Nothing here reads the
command line or prints; the views (:mod:`mhlo_cost.views`) write what a study figures out.
"""
