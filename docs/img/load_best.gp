# Redraw: cd docs/img && gnuplot load_best.gp
set terminal pngcairo size 900,420 font ",10"
set output "load_best.png"
set termoption noenhanced
set multiplot layout 1,2 title "spmd against the best of vader, MPICH 4 and Open MPI 5 (2026-11-29, quiet machine; above 1: spmd faster)"
set logscale xy
set xlabel "bytes"
set xtics ("4" 4, "64" 64, "1K" 1024, "16K" 16384, "256K" 262144, "1M" 1048576)
set ylabel "best peer time / spmd time"
set key top left
set grid
set datafile missing "-"
set title "all_reduce"
set yrange [0.1:3000]
set key top left samplen 2 font ",8"
plot "load_best.dat" index 0 using 1:2 with linespoints title "world 2, idle", \
     "" index 0 using 1:3 with linespoints title "world 2, 1 busy per core", \
     "" index 0 using 1:4 with linespoints title "world 2, 2 busy per core", \
     "" index 0 using 1:5 with linespoints title "world 4, idle", \
     "" index 0 using 1:6 with linespoints title "world 4, 1 busy per core", \
     "" index 0 using 1:7 with linespoints title "world 4, 2 busy per core", \
     1 with lines lt -1 notitle
set title "ping-pong, world 2"
set yrange [0.1:30]
plot "load_best.dat" index 1 using 1:2 with linespoints title "idle", \
     "" index 1 using 1:3 with linespoints title "1 busy per core", \
     "" index 1 using 1:4 with linespoints title "2 busy per core", \
     1 with lines lt -1 notitle
unset multiplot
