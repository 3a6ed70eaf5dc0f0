export const meta = {name: 'fetch', slug: 'fetch', version: '1'};
export default async function (args, g) {
  const page = await fetch("https://example.com");
  return page.status;
}
