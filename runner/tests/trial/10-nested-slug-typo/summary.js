export const meta = {name: 'summary', slug: 'summary', version: '1'};
export default async function () {
  return "sum";
}
