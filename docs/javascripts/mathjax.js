// MathJax 3 configuration for pymdownx.arithmatex's generic output (\( \) and \[ \]).
window.MathJax = {
  tex: { inlineMath: [["\\(", "\\)"]], displayMath: [["\\[", "\\]"]],
         processEscapes: true, processEnvironments: true },
  options: { ignoreHtmlClass: ".*|", processHtmlClass: "arithmatex" }
};
document$.subscribe(() => {
  if (window.MathJax && MathJax.typesetPromise) {
    MathJax.startup.output.clearCache(); MathJax.typesetClear(); MathJax.texReset();
    MathJax.typesetPromise();
  }
});
