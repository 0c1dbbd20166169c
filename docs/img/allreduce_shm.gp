# Redraw: cd docs/img && gnuplot allreduce_shm.gp
set terminal pngcairo size 640,400 font ",10"
set output "allreduce_shm.png"
set termoption noenhanced
set title "all_reduce, world 2, shared memory (2026-11-26, commit 12da52b)"
set logscale xy
set xlabel "bytes"
set xtics ("4" 4, "128" 128, "4K" 4096, "128K" 131072, "4M" 4194304, "64M" 67108864)
set ylabel "time per call (µs)"
set key top left
set grid
plot "allreduce_shm.dat" using 1:2 with linespoints title "spmd", \
     "" using 1:3 with linespoints title "Open MPI 4.1.4 vader"
