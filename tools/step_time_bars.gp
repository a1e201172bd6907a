# gnuplot settings shared by tools/plot_ablation.sh and
# tools/plot_ablation_ab.sh: step time per graph as clustered bars on a log
# scale (a TSV with the graph in column 1). Loaded with `load`.
set datafile separator "\t"
set grid ytics
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set logscale y 10
set ylabel "ms"
set xtics rotate by -30
set key top left
