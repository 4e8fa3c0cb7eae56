// The dashboard's only script: copy buttons. Everything else works without it.
'use strict';
document.addEventListener('click', async (event) => {
  const button = event.target.closest('button[data-copy]');
  if (!button) return;
  const source = document.getElementById(button.dataset.copy);
  const status = document.getElementById(button.dataset.status || 'copy-status');
  if (!source) return;
  try {
    await navigator.clipboard.writeText(source.textContent.trim());
    if (status) status.textContent = 'Copied';
  } catch (err) {
    if (status) status.textContent = 'Copy failed: select the text and copy it by hand';
  }
});
